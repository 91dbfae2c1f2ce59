#!/usr/bin/env python3
"""A model name of any length over NATS (issue #21): a 5,000-byte model name
made a subject past nats-server's 4 KiB control line, the agent's connection
stopped and it exited 1. Now its subject token is bounded (a hash for long
names): the agent keeps running and a router indexes the model's blocks.
Real nats-server, kvindex-agent and kvindex-router on loopback; every wait
bounded; every process stopped by its pid.

Usage: test_long_model.py BIN_DIR
"""

import os
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
from nats_e2e import e2e  # noqa: E402

MODEL = "org/" + "m" * 5000


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    server = ne.NatsServer().start()
    agent = ne.Agent(bin_dir, server.url, "node-1", [engine.source("w0", MODEL, 4)])
    router = ne.NatsRouter(bin_dir, server.url)
    try:
        router.start().wait_ready(60)
        agent.start()

        def indexed():
            if agent.proc.poll() is not None:
                raise AssertionError("the agent exited %s:\n%s" % (agent.proc.returncode,
                                                                    agent.logs()[-2000:]))
            engine.publish([engine.stored([1], [1, 2, 3, 4], 4)])
            try:
                got = router.match({"model": MODEL, "tokens": [1, 2, 3, 4]})
            except AssertionError:  # 404 unknown model: nothing applied yet
                return False
            return [w["worker"] for w in got["workers"]] == ["w0"]

        e2e.wait_for(indexed, 30, "the long model's block indexed by the router", retry_every=1)
        assert agent.proc.poll() is None, agent.logs()
        assert agent.stop() == 0, agent.logs()
        print("ok: a %d-byte model name travels over NATS and is indexed" % len(MODEL))
    finally:
        agent.cleanup()
        router.cleanup()
        server.cleanup()
        engine.close()


if __name__ == "__main__":
    main()
