#!/usr/bin/env python3
"""A router reading only its models' messages, end to end (issue #25 item 4;
docs/scaling.md "How kvindex shards past one stream", item 3).

A real nats-server with the least-privilege permissions of docs/operations.md
(routers may ask `$JS.API.STREAM.MSG.GET.<stream>`), and two kvindex-router
--nats --models model-a replicas: `filtered` with --filter-subjects (one
consumer per subject, merged in stream order), `full` reading every message.
Raw clients publish as the agent of node-a (numbering msg_seq over all its
messages and subject_seq per subject, docs/events.md "Numbering") into
model-a and model-b, and as node-x into model-b only, with a header naming
another node: refused (subject_mismatch) by any router that receives it.
  - the filtered router receives no model-b message (node-x's 3 are refused
    by `full` and never reach `filtered`), sees no hole in node-a's
    numbering where model-b's messages are, and reaches the stream's last
    position although the stream ends in model-b's message;
  - /v1/match and /v1/state (digest, applied_seq) equal on both;
  - a lost model-a message (its subject_seq jumps) clears node-a's model-a
    sources on both routers; a lost model-b message clears nothing of model-a;
  - the filtered router stopped, more messages (a clear of every model on
    the control subject before a model-a store), restarted from its
    checkpoint: it applies only what came after it (one stored event), in
    stream order, and equals `full` again;
  - the review's hostile case (s11 finding 1), both routers at --max-nodes 2:
    node-z publishes only on model-b's subject, never heartbeating, and
    stores worker "c0" there; node-c's first model-a message stores "c0" in
    model a: node-z counts for model b only and its claim of "c0" is model
    b's, so both routers apply node-c's message and end at one digest (the
    unfiltered router used to refuse it, too_many_nodes, while the filtered
    one applied it).

Usage: test_filtered_router.py BIN_DIR SCENARIO   (scenario: filtered)
"""

import os
import sys
import time

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
import test_least_privilege as tlp  # noqa: E402
from nats_e2e import e2e  # noqa: E402

B = 4
MODEL_A = "model-a"  # nats::EncodeToken keeps [A-Za-z0-9-]: the token is the name
MODEL_B = "model-b"


class RawAgent:
    """Publishes as `node`'s agent would: msg_seq over every message,
    subject_seq per subject (token), one JetStream ack per message."""

    def __init__(self, raw, node):
        self.raw, self.node = raw, node
        self.incarnation = time.time_ns()
        self.msg_seq = 0
        self.subject_seq = {}
        self.event_id = 0

    def _event(self, kind, **fields):
        self.event_id += 1
        return dict(kind=kind, agent=self.node, event_id=self.event_id, ts_ns=time.time_ns(),
                    **fields)

    def stored(self, model, worker, tokens):
        return self._event("stored", model=model, worker=worker, dp_rank=0, tier="device",
                           hashes=e2e.canonical(tokens, B), block_size=B, parent=None)

    def cleared(self, worker):  # every model (the control subject)
        return self._event("cleared", model="", worker=worker, dp_rank=0)

    def heartbeat(self):
        return self._event("heartbeat", worker="", dp_rank=0, lease_ms=120000,
                           sources=[["w0", 0], ["w1", 0]])

    def send(self, token, events, lose_before=False, header_agent=None):
        """Publishes on <prefix>.<token>.<node>; lose_before: the subject's
        previous number is skipped (a message lost on the way)."""
        self.msg_seq += 1
        seq = self.subject_seq.get(token, 0) + (2 if lose_before else 1)
        self.subject_seq[token] = seq
        message = {"v": 1, "agent": header_agent or self.node, "incarnation": self.incarnation,
                   "msg_seq": self.msg_seq, "subject_seq": seq, "events": events}
        ack = self.raw.request("%s.%s.%s" % (tlp.PREFIX, token, self.node),
                               msgpack.packb(message))
        assert ack.get("seq", 0) > 0, ack
        return ack["seq"]


def prompt(n):
    return [1000 * n + i for i in range(3 * B)]


def workers(router, tokens):
    return [w["worker"] for w in router.match({"model": MODEL_A, "tokens": tokens})["workers"]]


def refused_mismatch(router):
    return tlp.sample(router, 'kvindex_router_log_messages_refused_total{reason="subject_mismatch"}')


def caught_up(routers, last):
    """Both at one position at or past `last` (a router judging a gap appends
    a snapshot request to the log), same digest; the states."""
    return ne.wait_state(routers, lambda s: all(x["applied_seq"] >= last for x in s)
                         and len({x["applied_seq"] for x in s}) == 1
                         and len({x["digest"] for x in s}) == 1, 30,
                         "both routers at one position >= %d with one digest" % last)


def same_matches(routers, prompts):
    for tokens in prompts:
        answers = [r.match({"model": MODEL_A, "tokens": tokens})["workers"] for r in routers]
        assert answers[0] == answers[1], answers


def scenario_filtered(bin_dir):
    names = ("agent-node-a", "agent-node-x", "agent-node-z", "agent-node-c", "router")
    passwords = {name: "pw-%s-%d" % (name, os.getpid()) for name in names}
    server = ne.NatsServer(config=tlp.server_config(passwords)).start()
    files = {}
    for name, password in passwords.items():
        files[name] = os.path.join(server.dir, name + ".password")
        with open(files[name], "w") as f:
            f.write(password + "\n")
    creds = ["--nats-user", "router", "--nats-password-file", files["router"],
             "--models", MODEL_A, "--checkpoint-interval", "0s", "--max-nodes", "2"]
    filtered = ne.NatsRouter(bin_dir, server.url, creds + ["--filter-subjects"])
    full = ne.NatsRouter(bin_dir, server.url, creds)
    routers = [filtered, full]
    raws = []
    try:
        for r in routers:
            r.start()
        for r in routers:
            r.wait_ready(60)
        raw_a = tlp.RawNats(server.port, "agent-node-a", passwords["agent-node-a"])
        raw_x = tlp.RawNats(server.port, "agent-node-x", passwords["agent-node-x"])
        raws = [raw_a, raw_x]
        a = RawAgent(raw_a, "node-a")
        x = RawAgent(raw_x, "node-x")

        # Model a and model b interleaved; the stream ends in model b's.
        a.send("_agent", [a.heartbeat()])
        a.send(MODEL_A, [a.stored(MODEL_A, "w0", prompt(1))])
        a.send(MODEL_B, [a.stored(MODEL_B, "w0", prompt(1))])
        a.send(MODEL_B, [a.stored(MODEL_B, "w1", prompt(2))])
        for _ in range(3):
            x.send(MODEL_B, [x.stored(MODEL_B, "x0", prompt(9))], header_agent="node-y")
        a.send(MODEL_A, [a.stored(MODEL_A, "w1", prompt(2))])
        last = a.send(MODEL_B, [a.stored(MODEL_B, "w0", prompt(3))])
        states = caught_up(routers, last)
        assert workers(filtered, prompt(1)) == ["w0"], workers(filtered, prompt(1))
        assert workers(filtered, prompt(2)) == ["w1"], workers(filtered, prompt(2))
        same_matches(routers, [prompt(1), prompt(2), prompt(3)])
        # Counted: node-x's model-b messages reached `full` (refused there),
        # never `filtered`.
        assert refused_mismatch(full) == 3, refused_mismatch(full)
        assert refused_mismatch(filtered) == 0, refused_mismatch(filtered)
        # Other models' positions are not lost ones.
        assert tlp.sample(filtered, 'kvindex_router_log_messages_total{outcome="position_gap"}') \
            == 0
        print("interleaved: both at %d, digest %s; node-x's model-b messages: full %d, "
              "filtered 0" % (last, states[0]["digest"], refused_mismatch(full)))

        # A lost model-a message: node-a's model-a sources cleared on both.
        a.send(MODEL_A, [a.stored(MODEL_A, "w0", prompt(4))], lose_before=True)
        # A lost model-b message: nothing of model a changes.
        last = a.send(MODEL_B, [a.stored(MODEL_B, "w1", prompt(5))], lose_before=True)
        caught_up(routers, last)
        assert workers(filtered, prompt(1)) == [], workers(filtered, prompt(1))
        assert workers(filtered, prompt(2)) == [], workers(filtered, prompt(2))
        assert workers(filtered, prompt(4)) == ["w0"], workers(filtered, prompt(4))
        same_matches(routers, [prompt(1), prompt(2), prompt(4)])

        # Restart from the checkpoint (written at shutdown). Meanwhile the
        # control subject clears w1 in every model, then model a stores
        # prompt 6 on w1: in stream order prompt 2 is gone and prompt 6 is
        # w1's (the other way round prompt 2 would stay).
        a.send(MODEL_A, [a.stored(MODEL_A, "w1", prompt(2))])
        last = a.send(MODEL_B, [a.stored(MODEL_B, "w0", prompt(6))])
        caught_up(routers, last)
        assert workers(filtered, prompt(2)) == ["w1"]
        filtered.stop()
        a.send("_agent", [a.cleared("w1")])
        a.send(MODEL_A, [a.stored(MODEL_A, "w1", prompt(6))])
        last = a.send(MODEL_B, [a.stored(MODEL_B, "w1", prompt(7))])
        filtered.start()
        filtered.wait_ready(60)
        states = caught_up(routers, last)
        assert workers(filtered, prompt(2)) == [], workers(filtered, prompt(2))
        assert workers(filtered, prompt(6)) == ["w1"], workers(filtered, prompt(6))
        assert workers(filtered, prompt(4)) == ["w0"], workers(filtered, prompt(4))
        same_matches(routers, [prompt(n) for n in range(1, 8)])
        stored = tlp.sample(filtered, 'kvindex_router_events_applied_total'
                            '{event_type="stored",status="applied",tier="device"}')
        assert stored == 1, "after the restart, applied %s stored events (want 1)" % stored
        assert refused_mismatch(filtered) == 0
        print("restart: resumed from its checkpoint, 1 stored event applied, both at %d, "
              "digest %s" % (last, states[0]["digest"]))

        # Hostile: node-z (model b only, no heartbeat) at the node cap, and
        # a claim of "c0" on model b's subject; node-c's model-a message.
        raw_z = tlp.RawNats(server.port, "agent-node-z", passwords["agent-node-z"])
        raws.append(raw_z)
        raw_c = tlp.RawNats(server.port, "agent-node-c", passwords["agent-node-c"])
        raws.append(raw_c)
        z = RawAgent(raw_z, "node-z")
        c = RawAgent(raw_c, "node-c")
        z.send(MODEL_B, [z.stored(MODEL_B, "c0", prompt(8))])
        last = c.send(MODEL_A, [c.stored(MODEL_A, "c0", prompt(8))])
        states = caught_up(routers, last)
        for r in routers:
            assert workers(r, prompt(8)) == ["c0"], workers(r, prompt(8))
            for reason in ("too_many_nodes", "foreign_source"):
                n = tlp.sample(r, 'kvindex_router_log_messages_refused_total{reason="%s"}'
                               % reason)
                assert n == 0, "%s refused %s messages" % (reason, n)
        same_matches(routers, [prompt(n) for n in range(1, 9)])
        print("hostile: node-z on model b only does not count for model a; node-c's message "
              "applied on both, digest %s" % states[0]["digest"])
    finally:
        for raw in raws:
            raw.close()
        for r in routers:
            r.cleanup()
        server.cleanup()


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
