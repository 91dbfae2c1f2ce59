#!/usr/bin/env python3
"""End to end: engines' ZMQ streams -> kvindex-router --embedded -> HTTP API.

Two engines publish real vLLM wire batches (one in map form, one in the
legacy array form with dp_rank 1). The router starts after the first
batches were published, so it must rebuild them from the replay sockets; live
batches follow. The test checks /v1/match per worker and tier, /v1/state
(digest recomputed here from the expected entries), /v1/workers, /query,
/metrics, kvindex-ctl (when built), and that a restarted router rebuilds the
same state from the engines' replay buffers.

Usage: test_embedded_router.py BIN_DIR
"""

import json
import os
import subprocess
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402

B = 4
MODEL = "m"
TOKENS = list(range(1, 14))  # 3 full blocks + a partial tail
S = e2e.canonical(TOKENS, B)  # S[0..2]
L = e2e.canonical([1, 2, 3, 4], B, lora_name="my-lora")  # L[0]


def worker_row(worker, dp_rank, longest, device, host, disk, external, device_prefix):
    return {"worker": worker, "dp_rank": dp_rank, "longest": longest, "device": device,
            "host": host, "disk": disk, "external": external, "device_prefix": device_prefix}


def expect_match(router, workers, body=None, blocks=3):
    body = body or {"model": MODEL, "tokens": TOKENS}
    got = router.match(body)
    assert got["model"] == MODEL, got
    assert got["blocks"] == blocks, got
    assert got["workers"] == workers, json.dumps(got, indent=1)
    return got


def check_state(router, entries):
    state = router.json("GET", "/v1/state")
    want = e2e.digest(entries)
    counts = {tier: sum(1 for e in entries if e[3] == tier) for tier in e2e.TIERS}
    assert state["digest"] == want, (state, want)
    assert state["entries"] == counts, (state, counts)
    assert state["sources"] == len({(e[1], e[2]) for e in entries}), state
    assert state["ready"] is True, state
    return state


def main():
    bin_dir = sys.argv[1]
    e2e.check_hash_vectors()
    ctx = zmq.Context()
    a = e2e.Engine(ctx, dp_rank=0)                    # w0: map events
    b = e2e.Engine(ctx, dp_rank=1, array_form=True)   # w1: legacy array events, rank 1
    routers = []
    try:
        # Published before the router exists: only the replay buffers have them.
        a.publish([a.stored([101, 102, 103], TOKENS[:12], B)])
        a.publish([a.stored([101, 102], [], 0, medium="CPU")])          # placeholders -> host
        a.publish([a.stored([201], [1, 2, 3, 4], B, lora_name="my-lora")])
        a.publish([a.stored([103], [], 0, medium="STORAGE")])           # placeholder -> disk
        b.publish([b.stored([301, 302], TOKENS[:8], B, medium="CPU")])
        b.publish([b.stored([401], [1, 2, 3, 4], B, medium="GPU"),
                   b.stored([303], [9, 10, 11, 12], B, parent=302, medium="STORAGE")])

        sources = [a.source("w0", MODEL, B), b.source("w1", MODEL, B)]
        router = e2e.Router(bin_dir, sources).start()
        routers.append(router)
        router.wait_ready()

        entries = ([(MODEL, "w0", 0, "device", h) for h in S + L] +
                   [(MODEL, "w0", 0, "host", h) for h in S[:2]] +
                   [(MODEL, "w0", 0, "disk", S[2])] +
                   [(MODEL, "w1", 1, "host", h) for h in S[:2]] +
                   [(MODEL, "w1", 1, "device", S[0])] +
                   [(MODEL, "w1", 1, "disk", S[2])])
        expect_match(router, [worker_row("w0", 0, 3, 3, 0, 0, 0, 3),
                              worker_row("w1", 1, 3, 1, 1, 1, 0, 1)])
        # Same prefix by precomputed local hashes; a LoRA request matches only its blocks.
        expect_match(router, [worker_row("w0", 0, 2, 2, 0, 0, 0, 2),
                              worker_row("w1", 1, 2, 1, 1, 0, 0, 1)],
                     {"model": MODEL, "local_hashes": e2e.local_hashes(TOKENS[:8], B)}, blocks=2)
        expect_match(router, [worker_row("w0", 0, 1, 1, 0, 0, 0, 1)],
                     {"model": MODEL, "tokens": [1, 2, 3, 4], "lora_name": "my-lora"}, blocks=1)
        check_state(router, entries)

        # /v1/workers: model, agent, per-tier entries, last event time.
        workers = router.json("GET", "/v1/workers")["workers"]
        by_key = {(w["worker"], w["dp_rank"]): w for w in workers}
        assert set(by_key) == {("w0", 0), ("w1", 1)}, workers
        assert by_key[("w0", 0)]["entries"] == {"device": 4, "host": 2, "disk": 1, "external": 0}
        assert by_key[("w1", 1)]["entries"] == {"device": 1, "host": 2, "disk": 1, "external": 0}
        for w in workers:
            assert w["model"] == MODEL and w["agent"] == "e2e-node", w
            assert isinstance(w["last_event_unix_ms"], int) and w["last_event_unix_ms"] > 0, w

        # /query: the Mooncake indexer RFC #1403 shape (docs/compat.md), in tokens, cumulative.
        query = router.json("POST", "/query", {"token_ids": TOKENS, "model": MODEL,
                                               "block_size": B})["default"]
        assert query["w0"] == {"longest_matched": 12, "GPU": 12, "CPU": 12, "DISK": 12,
                               "DP": {"0": 12}}, query
        assert query["w1"] == {"longest_matched": 12, "GPU": 4, "CPU": 8, "DISK": 12,
                               "DP": {"1": 12}}, query

        # /metrics: router and agent families.
        status, headers, metrics = router.request("GET", "/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain"), headers
        assert 'kvindex_router_events_applied_total{event_type="stored",status="applied",tier="device"}' in metrics
        assert 'kvindex_router_index_entries{model="m",tier="host"} 4' in metrics, metrics
        assert "kvindex_router_lookup_duration_seconds_bucket" in metrics
        assert "kvindex_agent_" in metrics, "agent metrics missing"

        # Live: w0 drops S2 from GPU (still on disk), then w1 clears.
        a.publish([a.removed([103], medium="GPU")])
        entries.remove((MODEL, "w0", 0, "device", S[2]))
        want = [worker_row("w0", 0, 3, 2, 0, 1, 0, 2), worker_row("w1", 1, 3, 1, 1, 1, 0, 1)]
        e2e.wait_for(lambda: router.match({"model": MODEL, "tokens": TOKENS})["workers"] == want,
                     20, "live BlockRemoved applied", on_retry=a.nudge)
        b.publish([b.cleared()])
        entries = [e for e in entries if e[1] != "w1"]
        want = [worker_row("w0", 0, 3, 2, 0, 1, 0, 2)]
        e2e.wait_for(lambda: router.match({"model": MODEL, "tokens": TOKENS})["workers"] == want,
                     20, "live AllBlocksCleared applied", on_retry=b.nudge)
        e2e.wait_for(lambda: router.request("GET", "/readyz")[0] == 200, 20, "caught up")
        state = check_state(router, entries)

        # kvindex-ctl, when built: a table by default, JSON with --json.
        ctl = os.path.join(bin_dir, "kvindex-ctl")
        if os.path.exists(ctl):
            url = "http://127.0.0.1:%d" % router.port
            out = subprocess.run([ctl, "match", "--router", url, "--model", MODEL, "--tokens",
                                  ",".join(map(str, TOKENS))], capture_output=True, text=True,
                                 timeout=30)
            assert out.returncode == 0, out.stderr
            assert "WORKER" in out.stdout and "w0" in out.stdout, out.stdout
            out = subprocess.run([ctl, "state", "--router", url, "--json"], capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode == 0 and json.loads(out.stdout)["digest"] == state["digest"], out
            out = subprocess.run([ctl, "workers", "--router", url], capture_output=True, text=True,
                                 timeout=30)
            assert out.returncode == 0 and "e2e-node" in out.stdout, out
        else:
            print("note: %s not built; kvindex-ctl checks skipped" % ctl)

        # Restart: a new process rebuilds the same state from the replay buffers.
        assert router.stop() == 0, "router did not exit 0 on SIGTERM"
        router.start().wait_ready()
        restarted = check_state(router, entries)
        assert restarted["digest"] == state["digest"]
        expect_match(router, want)
        assert router.stop(sig=2) == 0, "router did not exit 0 on SIGINT"
        print("ok: embedded router end to end")
    finally:
        for router in routers:
            router.cleanup()
        a.close()
        b.close()
        ctx.term()


if __name__ == "__main__":
    main()
