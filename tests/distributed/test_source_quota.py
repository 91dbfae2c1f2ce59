#!/usr/bin/env python3
"""The fleet-wide source quota, end to end (issue #21; docs/security.md,
"A fleet-wide source quota").

A real nats-server (no per-node permissions: one client speaks as many
nodes, the worst case) and two kvindex-router --nats replicas with
--max-nodes 20. A raw client publishes, as nodes flood-01..19, 256 made-up
sources each into the model (4,864 sources: more than the model's 4,096
source ids). Then the real agent (node-a, two engines) starts and serves;
then three more made-up nodes publish.
  - the flood is bounded: 3/4 of the model (3,072) first come, then each
    further node its share (1,024 / 20 = 51); refused as model_sources_full;
  - nodes past --max-nodes are refused whole (too_many_nodes);
  - node-a's sources apply: /v1/match answers equal the embedded reference
    router fed the same engines (the old code had the model full: node-a's
    stores were not indexed);
  - both routers hold the same digest at the same position.

Scenario silent: nodes that announce sources but never heartbeat used to
keep their --max-nodes slots for good (no lease, so never expired). Two
routers with --max-nodes 3 --max-lease 3s; three made-up nodes each store
one source and never heartbeat; a fourth is refused (too_many_nodes). A
lease later the routers expire the three by the log (agent_expired, their
sources cleared), and the fourth node's next message applies; both routers
at the same digest.

Usage: test_source_quota.py BIN_DIR SCENARIO   (scenario: flood, silent)
"""

import os
import random
import sys
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
import test_distributed as td  # noqa: E402
import test_least_privilege as tlp  # noqa: E402
from nats_e2e import e2e  # noqa: E402

MODEL_TOKEN = "meta%2Fllama%203%2E1"  # td.MODEL through nats::EncodeToken
MAX_NODES = 20
SHARE = 1024 // MAX_NODES


def flood(raw, node, count, rng):
    """`node` stores one block into each of `count` made-up workers."""
    now = time.time_ns()
    events = [{"kind": "stored", "model": td.MODEL, "worker": "%s-fake%03d" % (node, i),
               "dp_rank": 0, "agent": node, "event_id": i + 1, "ts_ns": now,
               "tier": "device", "hashes": [rng.getrandbits(63)], "block_size": td.B,
               "parent": None} for i in range(count)]
    message = {"v": 1, "agent": node, "incarnation": now, "msg_seq": 1, "events": events}
    ack = raw.request("%s.%s.%s" % (tlp.PREFIX, MODEL_TOKEN, node), msgpack.packb(message))
    assert ack.get("seq", 0) > 0, ack
    return ack["seq"]


def start_routers(c, server):
    """Starts the cluster's routers; a raw client of `server` once they are ready."""
    for r in c.routers:
        r.start()
    for r in c.routers:
        r.wait_ready(60)
    return tlp.RawNats(server.port, "any", "any")


def scenario_flood(bin_dir):
    server = ne.NatsServer().start()
    c = td.Cluster(bin_dir, [server], router_extra=["--max-nodes", str(MAX_NODES)], routers=2)
    rng = random.Random(21)
    raw = None
    try:
        raw = start_routers(c, server)
        for n in range(1, 20):
            last = flood(raw, "flood-%02d" % n, 256, rng)
        # The honest node starts on a model the flood tried to fill.
        c.agent.start()
        c.reference.start()
        c.reference.wait_ready(30)
        e2e.wait_for(c.agent_ready, 30, "agent /readyz")
        c.drive(100)
        for n in range(20, 23):
            last = flood(raw, "flood-%02d" % n, 256, rng)
        # A fresh prompt per engine, stored last (the workload's random
        # clears may have dropped the earlier ones).
        fresh = []
        for load in c.loads:
            tokens, hashes = load._chain(3)
            load.engine.publish([load.engine.stored(hashes, tokens, td.B)])
            fresh.append(tokens)
        for r in c.routers:
            e2e.wait_for(lambda: r.state()["applied_seq"] >= last, 30, "the flood read")
        deadline = time.monotonic() + 60
        while True:
            for engine in c.engines:
                engine.nudge()
            try:
                ne.same_digest(c.routers, timeout=3)
                c.check_matches()
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        states = ne.same_digest(c.routers, timeout=10)
        for r in c.routers:
            # node-a's two sources hold entries in the index, and its prompts
            # match them (not only "equal to the reference").
            mine = {w["worker"]: sum(w["entries"].values())
                    for w in r.json("GET", "/v1/workers")["workers"] if w.get("agent") == "node-a"}
            assert mine.get("w0", 0) > 0 and mine.get("w1", 0) > 0, mine
            for tokens, worker in zip(fresh, ["w0", "w1"]):
                body = {"model": td.MODEL, "tokens": tokens}
                want = c.reference.match(body)["workers"]
                assert worker in [w["worker"] for w in want], (worker, want)
                assert r.match(body)["workers"] == want, (r.match(body), want)
            seen = {
                "model_sources_full": tlp.sample(
                    r, 'kvindex_router_log_messages_refused_total{reason="model_sources_full"}'),
                "too_many_nodes": tlp.sample(
                    r, 'kvindex_router_log_messages_refused_total{reason="too_many_nodes"}'),
                "over_source_limit": tlp.sample(
                    r, "kvindex_router_index_events_over_source_limit_total"),
                "fake sources": len([w for w in r.json("GET", "/v1/workers").get("workers", [])
                                     if str(w.get("worker", "")).startswith("flood-")]),
            }
            # flood-13..19 get their share, flood-20..22 are nodes too many.
            assert seen == {"model_sources_full": 7, "too_many_nodes": 3, "over_source_limit": 0,
                            "fake sources": 3072 + 7 * SHARE}, seen
        print("flood: 4,864 made-up sources of 19 nodes bounded to %d, 3 nodes past "
              "--max-nodes refused, node-a served (digest %s on both routers)"
              % (3072 + 7 * SHARE, states[0]["digest"]))
    finally:
        if raw is not None:
            raw.close()
        c.cleanup()


def scenario_silent(bin_dir):
    server = ne.NatsServer().start()
    c = td.Cluster(bin_dir, [server], router_extra=["--max-nodes", "3", "--max-lease", "3s"],
                   routers=2)
    rng = random.Random(22)
    raw = None
    expired = 'kvindex_router_log_messages_total{outcome="agent_expired"}'
    too_many = 'kvindex_router_log_messages_refused_total{reason="too_many_nodes"}'

    def workers(r):
        """Workers holding entries."""
        return sorted(w["worker"] for w in r.json("GET", "/v1/workers").get("workers", [])
                      if sum(w.get("entries", {}).values()) > 0)

    try:
        raw = start_routers(c, server)
        for n in range(1, 4):
            flood(raw, "silent-%d" % n, 1, rng)
        last = flood(raw, "silent-4", 1, rng)
        for r in c.routers:
            e2e.wait_for(lambda: r.state()["applied_seq"] >= last, 30, "the silent nodes read")
            assert tlp.sample(r, too_many) == 1, tlp.sample(r, too_many)
            assert workers(r) == ["silent-%d-fake000" % n for n in range(1, 4)], workers(r)
        # No heartbeat ever: a --max-lease later the routers expire them.
        for r in c.routers:
            e2e.wait_for(lambda: tlp.sample(r, expired) >= 3, 30,
                         "the silent nodes expired by the log")
            e2e.wait_for(lambda: workers(r) == [], 10, "the silent nodes' sources cleared")
        last = flood(raw, "silent-4", 1, rng)
        for r in c.routers:
            e2e.wait_for(lambda: r.state()["applied_seq"] >= last, 30, "silent-4 read")
            assert workers(r) == ["silent-4-fake000"], workers(r)
            assert tlp.sample(r, too_many) == 1, tlp.sample(r, too_many)
        states = ne.same_digest(c.routers, timeout=10)
        print("silent: three nodes that never heartbeat expired after --max-lease 3s, "
              "their slots taken by a fourth (digest %s on both routers)" % states[0]["digest"])
    finally:
        if raw is not None:
            raw.close()
        c.cleanup()


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
