#!/usr/bin/env python3
"""End to end: /v1/match shows predict on route's entries apart (issue #22
item 7). kvindex-router --embedded --epp with a short speculative TTL, two
engines publishing real vLLM KV events over ZMQ; w0 holds another prompt
(so the model is known), nobody holds PROMPT.

- Before any pick: /v1/match for PROMPT has no "speculative" field.
- After a pick through ext_proc (epp_harness.py): "speculative" names the
  picked worker with PROMPT's blocks (capped by max_blocks like the match);
  "workers" and the digest (/v1/state) are unchanged: speculation is never
  in the index.
- After the TTL the field is gone again.

Usage: test_epp_speculative.py BIN_DIR
"""

import json
import os
import sys
import tempfile
import time

import grpc
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, HERE)
import kvindex_e2e as e2e  # noqa: E402
import epp_harness as h  # noqa: E402

B = 4
MODEL = "m"
PROMPT = list(range(100, 120))  # 5 blocks nobody holds
OTHER = list(range(1, 9))
EP = ["127.0.0.1:9000", "127.0.0.1:9001"]
TTL_MS = 1500


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engines = [e2e.Engine(ctx), e2e.Engine(ctx)]
    router = None
    try:
        engines[0].publish([engines[0].stored([1, 2], OTHER, B)])
        sources = [e.source("w%d" % i, MODEL, B) + ",endpoint=" + EP[i]
                   for i, e in enumerate(engines)]
        config = os.path.join(tempfile.mkdtemp(prefix="kvindex-epp-spec-"), "epp.yaml")
        with open(config, "w") as f:
            f.write("speculative: {ttl_ms: %d}\nseed: 7\n" % TTL_MS)
        epp_port = e2e.free_port()
        router = e2e.Router(bin_dir, sources, extra_args=[
            "--epp", "127.0.0.1:%d" % epp_port, "--epp-config", config,
            # Nothing serves /metrics at EP: no load signals.
            "--load-interval", "0"]).start()
        router.wait_ready()
        e2e.wait_for(lambda: router.match({"model": MODEL, "tokens": OTHER})["workers"], 10,
                     "w0's blocks in the index")
        channel = grpc.insecure_channel("127.0.0.1:%d" % epp_port)

        before = router.match({"model": MODEL, "tokens": PROMPT})
        assert "speculative" not in before and before["workers"] == [], before
        digest = router.json("GET", "/v1/state")["digest"]

        body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 1}).encode()
        picked_at = time.monotonic()
        first = h.pick(channel, body)
        header, meta, _ = h.pick_of(first)
        assert header == meta, (header, meta)
        picked = EP.index(header.split(",")[0])

        after = router.match({"model": MODEL, "tokens": PROMPT})
        assert time.monotonic() - picked_at < TTL_MS / 1000.0, "too slow to see the entries"
        assert after["speculative"] == [{"worker": "w%d" % picked, "dp_rank": 0, "blocks": 5}], after
        assert after["workers"] == before["workers"] and after["blocks"] == 5, after
        capped = router.match({"model": MODEL, "tokens": PROMPT, "max_blocks": 2})
        assert capped["speculative"] == [{"worker": "w%d" % picked, "dp_rank": 0, "blocks": 2}], (
            capped)
        # A prompt sharing only PROMPT's first 2 blocks: 2 speculative blocks.
        fork = router.match({"model": MODEL, "tokens": PROMPT[:8] + [7] * 12})
        assert fork["speculative"] == [{"worker": "w%d" % picked, "dp_rank": 0, "blocks": 2}], fork
        # The other prompt: the index's answer, nothing speculative.
        assert "speculative" not in router.match({"model": MODEL, "tokens": OTHER})
        assert router.json("GET", "/v1/state")["digest"] == digest

        e2e.wait_for(lambda: "speculative" not in router.match({"model": MODEL, "tokens": PROMPT}),
                     TTL_MS / 1000.0 + 5, "the speculative entries to expire")
        assert time.monotonic() - picked_at >= TTL_MS / 1000.0 * 0.9
        assert router.match({"model": MODEL, "tokens": PROMPT})["workers"] == []
        assert router.json("GET", "/v1/state")["digest"] == digest
        channel.close()
        assert router.stop() == 0, router.logs()
        router = None
        print("1 passed, 0 failed")
    finally:
        if router is not None:
            router.cleanup()
        for e in engines:
            e.close()


if __name__ == "__main__":
    main()
