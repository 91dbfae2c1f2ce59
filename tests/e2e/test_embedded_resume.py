#!/usr/bin/env python3
"""kvindex-router --embedded restarts from its checkpoint and its sources
continue from their engine sequence: no start-up clear, no replay from seq 0,
and what the engines did while it was down arrives from their replay buffers.

Real processes and sockets: two Python engines (vLLM wire form, PUB + replay
ROUTER) and the real router binary. After each restart /v1/state must equal
the engines' truth exactly (digest recomputed here), and the router's
kvindex_agent_clears_total{cause="startup"} must stay 0:
  1. a clean stop (SIGTERM: the final checkpoint holds the sources' states),
     with stores and removals published while the router is down;
  2. kill -9 after a periodic checkpoint, with events after that checkpoint
     (the engines' buffers serve them again);
  3. an engine restarted (seq from 0, empty cache) while the router was down:
     that source alone starts afresh (cause="restart"), nothing stale stays.

Usage: test_embedded_resume.py BIN_DIR
"""

import os
import signal
import sys
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402

B = 4
MODEL = "m"


class Truth:
    """What each engine holds: worker -> {canonical hash: engine hash}."""

    def __init__(self):
        self.held = {}
        self.chains = {}

    def store_chain(self, engine, worker, chain, n):
        tokens = [chain * 10000 + k for k in range(n * B)]
        hashes = [chain * 1000 + i + 1 for i in range(n)]
        engine.publish([engine.stored(hashes, tokens, B)])
        canon = e2e.canonical(tokens, B)
        self.chains[chain] = (hashes, canon)
        self.held.setdefault(worker, {}).update(zip(canon, hashes))

    def remove_tail(self, engine, worker, chain, k):
        hashes, canon = self.chains[chain]
        engine.publish([engine.removed(hashes[-k:])])
        for h in canon[-k:]:
            self.held[worker].pop(h, None)

    def forget(self, worker):
        self.held[worker] = {}

    def entries(self):
        return [(MODEL, worker, 0, "device", h)
                for worker, held in self.held.items() for h in held]


def metrics(router):
    status, _, body = router.request("GET", "/metrics")
    assert status == 200, status
    return body


def clears(router, cause):
    body = metrics(router)
    total = 0
    for line in body.splitlines():
        if line.startswith("kvindex_agent_clears_total{") and 'cause="%s"' % cause in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def metric(router, name):
    for line in metrics(router).splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_truth(router, truth, engines, what):
    want = e2e.digest(truth.entries())

    def nudge():
        for engine in engines:
            engine.nudge()
    e2e.wait_for(lambda: router.json("GET", "/v1/state")["digest"] == want, 30, what,
                 on_retry=nudge, retry_every=2.0)
    state = router.json("GET", "/v1/state")
    assert state["entries"]["device"] == len(truth.entries()), state
    return state


def main():
    bin_dir = sys.argv[1]
    e2e.check_hash_vectors()
    ctx = zmq.Context()
    a = e2e.Engine(ctx)
    b = e2e.Engine(ctx)
    truth = Truth()
    router = None
    try:
        truth.store_chain(a, "w0", 1, 8)
        truth.store_chain(b, "w1", 2, 8)
        sources = [a.source("w0", MODEL, B), b.source("w1", MODEL, B)]
        router = e2e.Router(bin_dir, sources, extra_args=["--checkpoint-interval", "300ms"])
        router.start().wait_ready()
        wait_truth(router, truth, [a, b], "first state")
        assert clears(router, "startup") == 2, "a fresh router clears its sources once"

        # 1. Clean stop; the engines go on meanwhile.
        assert router.stop() == 0
        truth.remove_tail(a, "w0", 1, 3)
        truth.store_chain(a, "w0", 3, 4)
        truth.store_chain(b, "w1", 4, 2)
        router.start().wait_ready()
        wait_truth(router, truth, [a, b], "resumed after a clean stop")
        assert clears(router, "startup") == 0, "resumed sources must not clear"
        print("ok: clean restart resumed both sources")

        # 2. kill -9 after a periodic checkpoint, with events after it.
        truth.store_chain(a, "w0", 5, 3)
        state = wait_truth(router, truth, [a, b], "before the checkpoint")
        e2e.wait_for(lambda: (metric(router, "kvindex_checkpoint_applied_seq") or 0)
                     >= state["applied_seq"], 20, "a checkpoint at the current position")
        truth.store_chain(b, "w1", 6, 3)
        truth.remove_tail(b, "w1", 2, 2)
        wait_truth(router, truth, [a, b], "after the checkpoint")
        router.stop(sig=signal.SIGKILL)
        truth.store_chain(a, "w0", 7, 2)
        router.start().wait_ready()
        wait_truth(router, truth, [a, b], "resumed after kill -9")
        assert clears(router, "startup") == 0, "resumed sources must not clear"
        print("ok: kill -9 resumed both sources; events after the checkpoint replayed")

        # 3. Engine b restarts while the router is down: seq from 0, empty cache.
        assert router.stop() == 0
        with b.lock:
            b.seq = 0
            b.buffer = []
        truth.forget("w1")
        truth.store_chain(b, "w1", 8, 3)
        truth.store_chain(a, "w0", 9, 1)
        router.start().wait_ready()
        wait_truth(router, truth, [a, b], "w1 started afresh, w0 resumed")
        assert clears(router, "startup") == 0, clears(router, "startup")
        assert clears(router, "restart") == 1, clears(router, "restart")
        assert router.stop() == 0
        print("ok: a restarted engine's source started afresh; nothing stale")
    finally:
        if router is not None:
            router.cleanup()
        a.close()
        b.close()
        ctx.term()


if __name__ == "__main__":
    start = time.monotonic()
    main()
    print("embedded resume passed in %.1fs" % (time.monotonic() - start))
