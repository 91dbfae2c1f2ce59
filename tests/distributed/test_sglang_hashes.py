#!/usr/bin/env python3
"""An unmodified sgl-router's own hashes answered from the replicated log
(issue #24, docs/compat.md "SGLang").

Two simulated SGLang engines (ZMQ KV events whose block_hashes are SGLang's
SHA-256 page chain, as SGLang publishes them) are followed by a real
kvindex-agent, which publishes to a real nats-server; two kvindex-router
--nats replicas serve SGLang's KV indexer gRPC. A client sends what
sgl-router sends: the SHA-256 chain hashes computed here from the prompt's
tokens (per page: SHA-256 over the parent page's digest and the tokens as
little-endian u32; the first 8 bytes big-endian as i64), and every replica
names the worker holding the prefix (a replica restarted from its
checkpoint too: the checkpoint holds the alias map), then less after a
removal, and nobody after a clear (fail closed). The protobuf wire is written by hand
(tests/e2e/test_sglang_indexer.py) from SGLang's field numbers.

Usage: test_sglang_hashes.py BIN_DIR
"""

import hashlib
import os
import struct
import sys

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import nats_e2e as ne  # noqa: E402
import test_sglang_indexer as wire  # noqa: E402
from nats_e2e import e2e  # noqa: E402

MODEL = "sgl-model"
B = 4


def sglang_hashes(tokens, page=B):
    """sgl-router's page hashes of a prompt (full pages only), as i64."""
    out, prior = [], b""
    for start in range(0, len(tokens) - len(tokens) % page, page):
        digest = hashlib.sha256(
            prior + b"".join(struct.pack("<I", t) for t in tokens[start:start + page])).digest()
        out.append(struct.unpack(">q", digest[:8])[0])
        prior = digest
    return out


def prefix(client, hashes):
    got = client.prefix(hashes)
    return {m["worker_id"]: (m["matched_prefix_blocks"], m["worker_address"])
            for m in got["matches"]}, got["best_prefix_blocks"]


def embedded_router(bin_dir, ctx, hashes, tokens):
    """The same through kvindex-router --embedded following the engine itself."""
    engine = e2e.Engine(ctx)
    port = e2e.free_port()
    router = e2e.Router(bin_dir, [engine.source("w9", MODEL, B, engine="sglang") +
                                  ",endpoint=127.0.0.1:30009"],
                        ["--sglang-indexer", "127.0.0.1:%d" % port, "--sglang-model", MODEL])
    try:
        router.start().wait_ready()
        engine.publish([engine.stored(hashes, tokens, B)])
        client = wire.Client(port)
        want = ({"w9": (len(hashes), "http://127.0.0.1:30009")}, len(hashes))
        e2e.wait_for(lambda: prefix(client, hashes) == want, 30,
                     "the embedded router answers sgl-router's hashes", on_retry=engine.nudge)
    finally:
        router.cleanup()
        engine.close()


def main(bin_dir):
    ctx = zmq.Context()
    engines = {"w0": e2e.Engine(ctx), "w1": e2e.Engine(ctx)}
    addresses = {"w0": "127.0.0.1:30001", "w1": "127.0.0.1:30002"}
    server = ne.NatsServer().start()
    sources = [engines[w].source(w, MODEL, B, engine="sglang") + ",endpoint=" + addresses[w]
               for w in ("w0", "w1")]
    agent = ne.Agent(bin_dir, server.url, "node-1", sources)
    grpc_ports = [e2e.free_port(), e2e.free_port()]
    routers = [ne.NatsRouter(bin_dir, server.url,
                             ["--sglang-indexer", "127.0.0.1:%d" % p, "--sglang-model", MODEL])
               for p in grpc_ports]
    try:
        for r in routers:
            r.start().wait_ready(60)
        agent.start()
        clients = [wire.Client(p) for p in grpc_ports]

        prompt_a = list(range(100, 112))             # 3 pages
        prompt_b = [7, 7, 7, 7, 9, 9, 9, 9]           # 2 pages
        a, b = sglang_hashes(prompt_a), sglang_hashes(prompt_b)
        assert len(a) == 3 and len(b) == 2

        def stored(engine, hashes, tokens):
            return engine.stored(hashes, tokens, B)

        # w0 holds all of A; w1 A's first page and B. SGLang chains a stored
        # event's pages after parent_block_hash (nil: the root). Published
        # once: a batch the agent missed (slow joiner) is replayed after
        # the next one shows the gap (nudge).
        engines["w0"].publish([stored(engines["w0"], a, prompt_a)])
        engines["w1"].publish([stored(engines["w1"], a[:1], prompt_a[:4]),
                               stored(engines["w1"], b, prompt_b)])

        def nudge():
            for engine in engines.values():
                engine.nudge()

        want = {"w0": (3, "http://" + addresses["w0"]), "w1": (1, "http://" + addresses["w1"])}

        def answered(expected_a, expected_b):
            def check():
                return all(prefix(c, a) == expected_a and prefix(c, b) == expected_b
                           for c in clients)
            return check

        e2e.wait_for(answered((want, 3), ({"w1": (2, "http://" + addresses["w1"])}, 2)), 30,
                     "every replica answers sgl-router's hashes", on_retry=nudge,
                     retry_every=1)
        ne.same_digest(routers)

        # Replica 0 restarts (a clean stop writes a checkpoint) and reads the
        # log from its checkpoint's position on: it holds the same aliases as
        # replica 1 at once, and answers sgl-router's hashes (once it knows
        # the workers' addresses again), only because the checkpoint holds
        # the alias map.
        assert routers[0].stop() == 0, routers[0].logs()[-3000:]
        routers[0].start().wait_ready(60)
        assert "restored checkpoint" in routers[0].logs(), routers[0].logs()[-3000:]
        aliases = [r.metric("kvindex_router_sglang_aliases") for r in routers]
        assert aliases[0] == aliases[1] >= 5, aliases
        clients[0] = wire.Client(grpc_ports[0])
        e2e.wait_for(answered((want, 3), ({"w1": (2, "http://" + addresses["w1"])}, 2)), 30,
                     "the restarted replica answers sgl-router's hashes", retry_every=1)
        ne.same_digest(routers)

        # MatchExternalKv: each SGLang hash reported held, in TIER_HBM (1),
        # as the client sent it.
        for c in clients:
            nodes = {n["worker_id"]: n for n in c.match(a + b)}
            assert set(nodes) == {"w0", "w1"}, nodes
            assert nodes["w0"]["tiers"] == {1: a}, nodes["w0"]
            assert nodes["w1"]["tiers"] == {1: a[:1] + b}, nodes["w1"]
            assert nodes["w0"]["address"] == "http://" + addresses["w0"]

        # Our canonical hashes still answer (the fallback).
        canonical = [wire.as_i64(h) for h in e2e.seq_hashes(e2e.local_hashes(prompt_a, B))]
        for c in clients:
            assert prefix(c, canonical) == (want, 3), prefix(c, canonical)

        # w0 evicts A's last page: its prefix shrinks on every replica.
        engines["w0"].publish([engines["w0"].removed(a[2:])])
        e2e.wait_for(answered(({"w0": (2, want["w0"][1]), "w1": want["w1"]}, 2),
                              ({"w1": (2, "http://" + addresses["w1"])}, 2)), 30,
                     "the removal answered", on_retry=nudge)
        # w1 restarts its cache: nobody holds B, and A's first page is w0's only.
        engines["w1"].publish([engines["w1"].cleared()])
        e2e.wait_for(answered(({"w0": (2, want["w0"][1])}, 2), ({}, 0)), 30,
                     "the clear answered (fail closed)", on_retry=nudge)
        ne.same_digest(routers)
        # A's first two pages (w0's) keep their aliases; B's went with the
        # clear, A's third with its removal (the map follows the index by a
        # few microseconds: waited for).
        for r in routers:
            e2e.wait_for(lambda: r.metric("kvindex_router_sglang_aliases") == 2, 10,
                         "exactly A's two held pages aliased")
        assert agent.stop() == 0, agent.logs()
        embedded_router(bin_dir, ctx, a, prompt_a)
        print("ok: sgl-router's SHA-256 hashes answered on both replicas from the log, "
              "and by an embedded router")
    except AssertionError:
        for r in routers:
            sys.stderr.write(r.logs()[-3000:])
        sys.stderr.write(agent.logs()[-3000:])
        raise
    finally:
        agent.cleanup()
        for r in routers:
            r.cleanup()
        server.cleanup()
        for engine in engines.values():
            engine.close()


if __name__ == "__main__":
    main(sys.argv[1])
