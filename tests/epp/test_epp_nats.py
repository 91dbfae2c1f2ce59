#!/usr/bin/env python3
"""End to end: the endpoint picker of a replicated router (kvindex-router
--nats --epp) with endpoints from --endpoints-file.

An engine publishes w1's blocks through kvindex-agent and JetStream (a real
nats-server); the router's picks follow the prefix among the file's
endpoints; the file is rewritten and the next pick uses the new endpoints
(re-read on change); a model with no endpoint in the file is 503.

Usage: test_epp_nats.py BIN_DIR
"""

import json
import os
import shutil
import sys
import tempfile

import grpc
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
sys.path.insert(0, HERE)
import nats_e2e  # noqa: E402
import epp_harness as h  # noqa: E402
from nats_e2e import e2e  # noqa: E402

B = 4
TOKENS = list(range(1, 17))


def write(path, endpoints):
    with open(path + ".tmp", "w") as f:
        f.write("endpoints:\n")
        for name, address in endpoints:
            f.write("  - {name: %s, address: %s, port: 8000, labels: {model: m}}\n" % (name, address))
    os.replace(path + ".tmp", path)


def pick(channel, model="m"):
    s = h.Stream(channel)
    s.headers()
    s.body(json.dumps({"model": model, "prompt": TOKENS}).encode(), True)
    first = s.recv()
    s.close()
    if first.WhichOneof("response") == "immediate_response":
        return first.immediate_response.status.code
    return h.pick_of(first)[0]


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    nats = nats_e2e.NatsServer().start()
    workdir = tempfile.mkdtemp(prefix="kvindex-epp-nats-")
    path = os.path.join(workdir, "endpoints.yaml")
    agent = router = None
    try:
        write(path, [("w0", "127.0.0.5"), ("w1", "127.0.0.6")])
        engine.publish([engine.stored([11, 12, 13, 14], TOKENS, B)])
        agent = nats_e2e.Agent(bin_dir, nats.url, "node-a", [engine.source("w1", "m", B)]).start()
        port = e2e.free_port()
        router = nats_e2e.NatsRouter(bin_dir, nats.url, extra=[
            "--epp", "127.0.0.1:%d" % port, "--endpoints-file", path]).start()
        router.wait_ready()
        e2e.wait_for(lambda: router.match({"model": "m", "tokens": TOKENS})["workers"], 20,
                     "w1's blocks through JetStream", on_retry=engine.nudge)
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        assert pick(channel) == "127.0.0.6:8000,127.0.0.5:8000", pick(channel)
        # The file changes: w1 now at another address, w0 gone.
        write(path, [("w1", "127.0.0.7"), ("w2", "127.0.0.8")])
        e2e.wait_for(lambda: pick(channel) == "127.0.0.7:8000,127.0.0.8:8000", 5, "re-read file")
        assert pick(channel, model="other") == 503
        channel.close()
        assert router.stop() == 0, router.logs()
        router = None
        print("1 passed, 0 failed")
    finally:
        for p in (router, agent):
            if p is not None:
                p.cleanup()
        nats.cleanup()
        engine.close()
        ctx.term()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
