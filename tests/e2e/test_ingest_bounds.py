#!/usr/bin/env python3
"""Bounded ingest of a real kvindex-router --embedded (issue #11): an engine
message over --zmq-max-message-bytes is never read whole; libzmq drops the
connection, the router counts it (kvindex_agent_sub_disconnects_total) and
keeps indexing what comes after. A batch envelope naming a dp_rank outside
the source's declared range is dropped (rank_out_of_range) and creates no
source. A source at --max-blocks-per-tier has its further stored events
dropped (block_cap) until removals bring it under. Loopback only; every
wait is bounded. --max-model-bytes reaches the index: with a cap too small
for any block, nothing is indexed and the blocks are counted.

Usage: test_ingest_bounds.py BIN_DIR
"""

import os
import re
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402


def metric(router, pattern):
    status, _, text = router.request("GET", "/metrics")
    assert status == 200, status
    total = 0.0
    for line in text.splitlines():
        if re.match(pattern, line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def disconnects(router):
    return metric(router, r"^kvindex_agent_sub_disconnects_total\{")


def capped(router):
    return metric(router, r'^kvindex_agent_events_dropped_total\{.*reason="block_cap"')


def rank_drops(router):
    return metric(router, r'^kvindex_agent_events_dropped_total\{.*reason="rank_out_of_range"')


def matched(router, tokens):
    got = router.match({"model": "m", "tokens": tokens})
    return [w["worker"] for w in got["workers"]]


def check_model_cap(bin_dir, ctx):
    engine = e2e.Engine(ctx)
    router = e2e.Router(bin_dir, [engine.source("w0", "m", 4)],
                        extra_args=["--max-model-bytes", "1"])
    try:
        router.start().wait_ready()
        e2e.wait_for(lambda: engine.publish([engine.stored([1], [1, 2, 3, 4], 4)]) is not None
                     and metric(router, r"^kvindex_router_index_blocks_not_indexed_total") >= 1,
                     15, "kvindex_router_index_blocks_not_indexed_total >= 1", retry_every=1)
        assert matched(router, [1, 2, 3, 4]) == [], "a block past --max-model-bytes was indexed"
        assert router.stop() == 0
        print("ok: --max-model-bytes reaches the index")
    finally:
        router.cleanup()
        engine.close()


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    # w1 is declared as rank 0 (dp_rank=0); its engine stamps 7, then
    # 4294967295, into the envelope.
    stray = e2e.Engine(ctx, dp_rank=7)
    w1 = stray.source("w1", "m", 4).replace(",dp_rank=7", ",dp_rank=0")
    # The documented DP-rank form (issue #21): a second --source for w0 on its
    # own port, no dp_rank=; its engine stamps rank 1, so the socket serves
    # rank 1 (one publisher, one rank) and refuses any other rank.
    rank1 = e2e.Engine(ctx, dp_rank=1)
    w0_rank1 = rank1.source("w0", "m", 4).replace(",dp_rank=1", "")
    # w2 declares dp_ranks=2 (ports p and p+1); its engine on p stamps rank 1.
    ranked = e2e.Engine(ctx, dp_rank=1)
    w2 = ranked.source("w2", "m", 4).replace(",dp_rank=1", ",dp_ranks=2").replace(
        ",replay=tcp://127.0.0.1:%d" % ranked.replay_port, "")
    full = e2e.Engine(ctx)  # w3: capped at 4 blocks per tier
    # w4 is configured as rank 1 (ranks [0, 2) accepted); its engine stamps
    # rank 0 first: (w4, 0) is a source nobody configured or announces.
    odd = e2e.Engine(ctx, dp_rank=1)
    w4 = odd.source("w4", "m", 4)
    router = e2e.Router(bin_dir, [engine.source("w0", "m", 4), w1, w2, full.source("w3", "m", 4), w4,
                                  w0_rank1],
                        extra_args=["--zmq-max-message-bytes", "1048576",
                                    "--max-blocks-per-tier", "4"])
    try:
        router.start().wait_ready()
        # Block cap: 4 blocks held on device, the next stored event (2 more)
        # is dropped and counted in blocks; after 2 removals it is indexed.
        first = list(range(100, 116))   # 4 blocks
        second = list(range(200, 208))  # 2 blocks
        e2e.wait_for(lambda: full.publish([full.stored([11, 12, 13, 14], first, 4)]) is not None
                     and matched(router, first) == ["w3"], 15, "w3's first 4 blocks indexed",
                     retry_every=1)
        full.publish([full.stored([21, 22], second, 4)])
        e2e.wait_for(lambda: capped(router) >= 2, 15, "block_cap counted (2 blocks)")
        assert matched(router, second) == [], "a stored event past the cap was indexed"
        full.publish([full.removed([13, 14])])
        e2e.wait_for(lambda: full.publish([full.stored([21, 22], second, 4)]) is not None
                     and matched(router, second) == ["w3"], 15,
                     "indexed again once under the cap", retry_every=1)
        print("ok: the per-tier block cap drops stored events past it, counted")
        # /v1/workers: (w4, 0) is listed while it holds a block, and gone once
        # it is cleared; the configured (w4, 1) stays although empty.
        def rows():
            return sorted((r["worker"], r["dp_rank"])
                          for r in router.json("GET", "/v1/workers")["workers"])
        odd.dp_rank = 0
        e2e.wait_for(lambda: odd.publish([odd.stored([1], [7, 7, 7, 7], 4)]) is not None
                     and ("w4", 0) in rows(), 15, "(w4, 0) listed", retry_every=1)
        odd.publish([odd.cleared()])
        e2e.wait_for(lambda: ("w4", 0) not in rows(), 15, "(w4, 0) gone after its clear")
        assert ("w4", 1) in rows(), rows()
        print("ok: a cleared source nobody announces leaves /v1/workers")
        # Rank range: w1's batches (rank 7, then the largest u32) are dropped
        # whole and counted; w2's rank 1 is inside its declared range.
        e2e.wait_for(lambda: stray.publish([stray.stored([1], [9, 9, 9, 9], 4)]) is not None
                     and rank_drops(router) >= 1, 15, "rank_out_of_range counted",
                     retry_every=1)
        stray.dp_rank = 4294967295
        before = rank_drops(router)
        e2e.wait_for(lambda: stray.publish([stray.stored([1], [9, 9, 9, 9], 4)]) is not None
                     and rank_drops(router) > before, 15, "rank 4294967295 dropped",
                     retry_every=1)
        e2e.wait_for(lambda: ranked.publish([ranked.stored([1], [8, 8, 8, 8], 4)]) is not None
                     and matched(router, [8, 8, 8, 8]) == ["w2"], 15, "w2 rank 1 indexed",
                     retry_every=1)
        assert matched(router, [9, 9, 9, 9]) == [], "a batch of an undeclared rank was indexed"
        rows = router.json("GET", "/v1/workers")["workers"]
        ranks = sorted((r["worker"], r["dp_rank"]) for r in rows)
        assert ("w1", 7) not in ranks and ("w1", 4294967295) not in ranks, ranks
        assert ("w2", 1) in ranks, ranks
        print("ok: envelope ranks outside the declared range dropped and counted; rows %s" % ranks)
        # Under the limit: indexed.
        e2e.wait_for(lambda: engine.publish([engine.stored([1], [1, 2, 3, 4], 4)]) is not None
                     and matched(router, [1, 2, 3, 4]) == ["w0"], 15, "a small batch indexed",
                     retry_every=1)
        # w0's second endpoint: rank 1 indexed beside rank 0, which keeps its
        # blocks; a batch of rank 0 on that socket is refused and counted.
        e2e.wait_for(lambda: rank1.publish([rank1.stored([2], [5, 5, 5, 5], 4)]) is not None
                     and matched(router, [5, 5, 5, 5]) == ["w0"], 15, "w0 rank 1 indexed",
                     retry_every=1)
        ranks = sorted((r["worker"], r["dp_rank"])
                       for r in router.json("GET", "/v1/workers")["workers"])
        assert ("w0", 0) in ranks and ("w0", 1) in ranks, ranks
        assert matched(router, [1, 2, 3, 4]) == ["w0"], "w0 rank 0 lost its blocks"
        rank1.dp_rank = 0
        before = rank_drops(router)
        e2e.wait_for(lambda: rank1.publish([rank1.stored([3], [6, 6, 6, 6], 4)]) is not None
                     and rank_drops(router) > before, 15, "a second rank on one socket dropped",
                     retry_every=1)
        assert matched(router, [6, 6, 6, 6]) == [], "a second rank on one socket was indexed"
        print("ok: a second --source for w0 without dp_rank= serves rank 1; %s" % ranks)
        assert disconnects(router) == 0, disconnects(router)
        # Over it: a 2 MiB message (one stored event with 512 Ki tokens).
        tokens = list(range(1, (2 << 20) // 4 + 1))
        engine.publish([engine.stored([2], tokens[:4], 4),
                        engine.stored([3], tokens, 4, parent=2)])
        e2e.wait_for(lambda: disconnects(router) >= 1, 15,
                     "kvindex_agent_sub_disconnects_total >= 1")
        # What follows is still indexed (after the reconnect), the big
        # batch's blocks never were.
        e2e.wait_for(lambda: matched(router, [5, 6, 7, 8]) == ["w0"], 20,
                     "a batch after the oversized one indexed",
                     on_retry=lambda: engine.publish([engine.stored([4], [5, 6, 7, 8], 4)]),
                     retry_every=1)
        assert matched(router, tokens[:4]) == [], "the oversized batch was indexed"
        assert router.stop() == 0
        print("ok: an oversized ZMQ message dropped unread and counted; ingest continues")
    except AssertionError:
        text = router.request("GET", "/metrics")[2]
        print("\n".join(l for l in text.splitlines() if l.startswith("kvindex_agent_") and
                        not l.endswith(" 0")))
        raise
    finally:
        router.cleanup()
        engine.close()
        rank1.close()
        stray.close()
        ranked.close()
        full.close()
        odd.close()
    try:
        check_model_cap(bin_dir, ctx)
    finally:
        ctx.term()


if __name__ == "__main__":
    main()
