#!/usr/bin/env python3
"""End to end: a fleet of replicated endpoint pickers (issue #22 items 4, 6
and the active-active test), real processes throughout.

Two kvindex-agents (node-a: w0, node-b: w1) follow ZMQ engines and announce
each source's endpoint=127.0.0.1:P on the log (heartbeats), and scrape the
engine's Prometheus /metrics at P (a small HTTP server playing vLLM's) to
publish load on core NATS. Two kvindex-router --nats --epp replicas over
the same JetStream stream, with no --endpoints-file:

  1. both learn both endpoints from the log; picks follow the prefix, and
     both replicas give the same pick and fallback list for the same
     request at the same digest (same seed, in-flight scorer off);
  2. load: the engine with the shorter queue and freer cache wins a request
     without prefix; an engine whose /metrics fails is not picked;
  3. node-b is killed -9: its load samples go stale (counted), then its
     lease expires and every replica forgets w1's endpoint;
  4. one router is killed -9: the other keeps answering, warm (prefix);
  5. an --embedded router scrapes the engines' /metrics itself.

Usage: test_epp_fleet.py BIN_DIR
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
PREFIXED = list(range(1, 17))     # w0 holds these blocks
FRESH = [[900 + i] * 16 for i in range(6)]  # nobody holds these


MetricsServer = nats_e2e.MetricsServer  # an engine's /metrics in vLLM's names


def pick(channel, tokens):
    """The x-gateway-destination-endpoint list (or the immediate status)."""
    s = h.Stream(channel)
    s.headers()
    s.body(json.dumps({"model": "m", "prompt": tokens}).encode(), True)
    first = s.recv()
    s.close()
    if first.WhichOneof("response") == "immediate_response":
        return first.immediate_response.status.code
    return h.pick_of(first)[0]


def stale(router):
    text = router.request("GET", "/metrics")[2]
    for line in text.splitlines():
        if line.startswith('kvindex_router_epp_load_samples_total{outcome="stale"}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no stale load counter in /metrics")


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engines = [e2e.Engine(ctx), e2e.Engine(ctx)]
    metrics = [MetricsServer(), MetricsServer()]
    a, b = metrics[0].address, metrics[1].address
    nats = nats_e2e.NatsServer().start()
    workdir = tempfile.mkdtemp(prefix="kvindex-epp-fleet-")
    config = os.path.join(workdir, "epp.yaml")
    with open(config, "w") as f:
        f.write("scorers: {prefix: 2, kv_cache: 1, queue: 1, inflight: 0}\nseed: 5\nfallbacks: 1\n"
                "speculative: {ttl_ms: 0}\n")
    agents, routers, channels = [], [], []
    try:
        for node, worker, engine, m in (("node-a", "w0", engines[0], metrics[0]),
                                        ("node-b", "w1", engines[1], metrics[1])):
            agents.append(nats_e2e.Agent(
                bin_dir, nats.url, node,
                [engine.source(worker, "m", B) + ",endpoint=" + m.address],
                extra=["--lease", "2s", "--heartbeat-interval", "200ms",
                       "--load-interval", "50ms"]).start())
        engines[0].publish([engines[0].stored([11, 12, 13, 14], PREFIXED, B)])
        for _ in range(2):
            port = e2e.free_port()
            router = nats_e2e.NatsRouter(bin_dir, nats.url, extra=[
                "--epp", "127.0.0.1:%d" % port, "--epp-config", config,
                "--load-max-age", "1s", "--liveness-interval", "100ms"]).start()
            routers.append(router)
            channels.append(grpc.insecure_channel("127.0.0.1:%d" % port))
        for router in routers:
            router.wait_ready()
            e2e.wait_for(lambda: router.match({"model": "m", "tokens": PREFIXED})["workers"], 20,
                         "w0's blocks through JetStream", on_retry=engines[0].nudge)

        # 1. Endpoints from the log; the same pick on both replicas.
        for channel in channels:
            e2e.wait_for(lambda: pick(channel, PREFIXED) == a + "," + b, 10,
                         "both endpoints announced, the prefix holder first")
        nats_e2e.same_digest(routers)
        for tokens in [PREFIXED] + FRESH:
            picks = [pick(channel, tokens) for channel in channels]
            assert picks[0] == picks[1], (tokens, picks)
        for router in routers:
            assert router.metric("kvindex_router_epp_endpoints_announced") == 2

        # 2. Load signals: the short queue and free cache win a fresh prompt.
        metrics[0].waiting, metrics[0].kv = 8, 0.9
        for channel in channels:
            e2e.wait_for(lambda: all(pick(channel, t) == b + "," + a for t in FRESH), 5,
                         "w1 (idle) first for prompts without prefix")
        metrics[0].waiting, metrics[0].kv = 0, 0.1
        metrics[1].waiting, metrics[1].kv = 8, 0.9
        for channel in channels:
            e2e.wait_for(lambda: all(pick(channel, t) == a + "," + b for t in FRESH), 5,
                         "w0 (idle) first for prompts without prefix")
        metrics[0].fail = True  # w0's engine stops answering /metrics: unhealthy
        for channel in channels:
            e2e.wait_for(lambda: pick(channel, PREFIXED) == b, 5, "unhealthy w0 not picked")
        metrics[0].fail = False
        for channel in channels:
            e2e.wait_for(lambda: pick(channel, PREFIXED) == a + "," + b, 5, "w0 healthy again")
        for router in routers:
            assert router.metric("kvindex_router_epp_load_samples_total") > 0

        # 3. node-b dies: stale load first (counted), then its endpoint goes.
        stale_before = stale(routers[0])
        agents[1].kill()
        e2e.wait_for(lambda: pick(channels[0], PREFIXED) and stale(routers[0]) > stale_before, 5,
                     "w1's samples stale")
        for channel in channels:
            e2e.wait_for(lambda: pick(channel, PREFIXED) == a, 10,
                         "w1's endpoint forgotten with its agent")

        # 4. One replica killed -9; the other answers, warm.
        routers[0].kill9()
        for tokens in [PREFIXED] + FRESH:
            assert pick(channels[1], tokens) == a, tokens
        assert routers[1].match({"model": "m", "tokens": PREFIXED})["workers"]
        for channel in channels:
            channel.close()
        assert routers[1].stop() == 0, routers[1].logs()
        routers.pop()

        # 5. --embedded scrapes the engines' /metrics itself.
        port = e2e.free_port()
        embedded = e2e.Router(bin_dir, [
            engines[0].source("w0", "m", B) + ",endpoint=" + a,
            engines[1].source("w1", "m", B) + ",endpoint=" + b], extra_args=[
            "--epp", "127.0.0.1:%d" % port, "--epp-config", config, "--load-interval", "50ms"])
        routers.append(embedded.start())
        embedded.wait_ready()
        channel = grpc.insecure_channel("127.0.0.1:%d" % port)
        metrics[1].waiting, metrics[1].kv = 0, 0.1
        e2e.wait_for(lambda: pick(channel, FRESH[0]) in (a + "," + b, b + "," + a), 5, "both")
        metrics[1].fail = True
        e2e.wait_for(lambda: pick(channel, FRESH[0]) == a, 5, "embedded: unhealthy w1 not picked")
        channel.close()
        assert embedded.stop() == 0, embedded.logs()
        routers.pop()
        print("1 passed, 0 failed")
    finally:
        for p in routers + agents:
            p.cleanup()
        nats.cleanup()
        for m in metrics:
            m.close()
        for engine in engines:
            engine.close()
        ctx.term()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
