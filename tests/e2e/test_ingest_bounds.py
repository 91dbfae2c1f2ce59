#!/usr/bin/env python3
"""Bounded ingest of a real kvindex-router --embedded (issue #11): an engine
message over --zmq-max-message-bytes is never read whole; libzmq drops the
connection, the router counts it (kvindex_agent_sub_disconnects_total) and
keeps indexing what comes after. Loopback only; every wait is bounded.

Usage: test_ingest_bounds.py BIN_DIR
"""

import os
import re
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402


def disconnects(router):
    status, _, text = router.request("GET", "/metrics")
    assert status == 200, status
    total = 0.0
    for line in text.splitlines():
        if re.match(r"^kvindex_agent_sub_disconnects_total\{", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def matched(router, tokens):
    got = router.match({"model": "m", "tokens": tokens})
    return [w["worker"] for w in got["workers"]]


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    router = e2e.Router(bin_dir, [engine.source("w0", "m", 4)],
                        extra_args=["--zmq-max-message-bytes", "1048576"])
    try:
        router.start().wait_ready()
        # Under the limit: indexed.
        e2e.wait_for(lambda: engine.publish([engine.stored([1], [1, 2, 3, 4], 4)]) is not None
                     and matched(router, [1, 2, 3, 4]) == ["w0"], 15, "a small batch indexed",
                     retry_every=1)
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
        ctx.term()


if __name__ == "__main__":
    main()
