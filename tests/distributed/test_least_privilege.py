#!/usr/bin/env python3
"""Least privilege in NATS and the routers' subject check, end to end
(issue #21 section 1; docs/operations.md "Least privilege", docs/security.md).

A real nats-server runs with the permissions docs/operations.md gives: each
agent may publish only on its own node's subjects (plus the JetStream API
calls it needs), routers may read the stream and publish only expiry. A real
kvindex-agent (node-a) and kvindex-router work under those credentials and
equal the embedded reference router. Then, speaking raw NATS protocol:
  - node-b's credentials are refused on node-a's subjects, on the routers'
    expiry subject and on the stream's admin API; the router's credentials
    are refused on an agent's subject;
  - a batch node-b may publish (its own subject) whose header says
    agent=node-a with incarnation 2^64-1, and which clears node-a's worker,
    is stored by JetStream but refused by the router (subject_mismatch):
    node-a's placements are untouched and its later messages still apply;
  - load samples (core NATS <prefix>_load.<node>, issue #22): the real
    agent scrapes its engine's /metrics (w0 has endpoint=) and publishes
    node-a's load under node-a's rights, and the router (with --epp,
    subscribed to <prefix>_load.* under its rights) receives those samples;
    node-b may publish only its own, and the router refuses a sample node-b
    sends about node-a's worker, and a report on node-b's subject naming
    node-a, while it goes on receiving node-a's.

Usage: test_least_privilege.py BIN_DIR SCENARIO   (scenario: least_privilege)
"""

import json
import os
import socket
import sys

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
import test_distributed as td  # noqa: E402
from nats_e2e import e2e  # noqa: E402

PREFIX = "kvindex.events"
STREAM = "KVINDEX"


def agent_permissions(node):
    """The permissions block of docs/operations.md for the agent on `node`."""
    return """{
      publish: {
        allow: ["%(p)s.*.%(n)s", "%(p)s_load.%(n)s", "$JS.API.STREAM.INFO.%(s)s",
                "$JS.API.STREAM.CREATE.%(s)s", "$JS.API.CONSUMER.CREATE.%(s)s",
                "$JS.API.CONSUMER.DELETE.%(s)s.*", "$JS.FC.%(s)s.>"]
        deny: ["%(p)s._expire.>"]
      }
      subscribe: { allow: ["_INBOX.>"] }
    }""" % {"p": PREFIX, "n": node, "s": STREAM}


def router_permissions():
    """The permissions block of docs/operations.md for routers."""
    return """{
      publish: {
        allow: ["%(p)s._expire.*", "$JS.API.STREAM.INFO.%(s)s", "$JS.API.STREAM.MSG.GET.%(s)s",
                "$JS.API.STREAM.CREATE.%(s)s", "$JS.API.STREAM.UPDATE.%(s)s",
                "$JS.API.CONSUMER.CREATE.%(s)s", "$JS.API.CONSUMER.DELETE.%(s)s.*",
                "$JS.FC.%(s)s.>"]
      }
      subscribe: { allow: ["_INBOX.>", "%(p)s_load.*"] }
    }""" % {"p": PREFIX, "s": STREAM}


def server_config(passwords):
    users = []
    for user, password in passwords.items():
        perms = router_permissions() if user == "router" else agent_permissions(user[len("agent-"):])
        users.append('    { user: "%s", password: "%s", permissions: %s }' % (user, password, perms))
    return "authorization {\n  users: [\n%s\n  ]\n}\n" % "\n".join(users)


class RawNats:
    """A NATS client in plain protocol: CONNECT, PUB, PING; -ERR collected."""

    def __init__(self, port, user, password):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""
        assert self._line().startswith(b"INFO "), "no INFO from nats-server"
        connect = ('{"user":"%s","pass":"%s","verbose":false,"pedantic":false,'
                   '"protocol":1,"name":"raw-%s"}' % (user, password, user))
        self.sock.sendall(b"CONNECT " + connect.encode() + b"\r\n")
        assert self.ping() == [], "CONNECT refused"

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError("nats-server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def ping(self):
        """Round trip; the -ERR lines the server sent before the PONG."""
        self.sock.sendall(b"PING\r\n")
        errors = []
        while True:
            line = self._line()
            if line == b"PONG":
                return errors
            if line.startswith(b"-ERR"):
                errors.append(line.decode())
            # PING from the server, +OK, INFO updates: ignored

    def publish(self, subject, payload):
        self.sock.sendall(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(payload), payload))
        return self.ping()

    def request(self, subject, payload):
        """PUB with a reply inbox; the reply's payload (a JetStream ack)."""
        inbox = "_INBOX.raw%d" % os.getpid()
        self.sock.sendall(b"SUB %s 1\r\nPUB %s %s %d\r\n%s\r\n" % (
            inbox.encode(), subject.encode(), inbox.encode(), len(payload), payload))
        while True:
            line = self._line()
            if line.startswith(b"-ERR"):
                raise AssertionError(line.decode())
            if line.startswith(b"MSG "):
                size = int(line.split()[-1])
                while len(self.buf) < size + 2:
                    self.buf += self.sock.recv(65536)
                data, self.buf = self.buf[:size], self.buf[size + 2:]
                self.sock.sendall(b"UNSUB 1\r\n")
                return json.loads(data)

    def close(self):
        self.sock.close()


def sample(router, series):
    """The value of one exact series (name and labels) in /metrics, 0 if absent."""
    return router.sample(series, 0.0)


def refused(errors, subject):
    return any("Permissions Violation" in e and subject in e for e in errors)


def scenario_least_privilege(bin_dir):
    passwords = {name: "pw-%s-%d" % (name, os.getpid())
                 for name in ("agent-node-a", "agent-node-b", "router")}
    server = ne.NatsServer(config=server_config(passwords)).start()
    files = {}
    for name, password in passwords.items():
        files[name] = os.path.join(server.dir, name + ".password")
        with open(files[name], "w") as f:
            f.write(password + "\n")
    c = td.Cluster(bin_dir, [server],
                   agent_extra=["--nats-user", "agent-node-a",
                                "--nats-password-file", files["agent-node-a"]],
                   router_extra=["--nats-user", "router",
                                 "--nats-password-file", files["router"],
                                 "--epp", "127.0.0.1:%d" % e2e.free_port()], routers=1,
                   lease="1s")
    # w0 announces its engine's port: the agent scrapes it and publishes
    # node-a's load on core NATS, under node-a's rights.
    engine = ne.MetricsServer()
    engine.waiting, engine.kv = 3, 0.25
    c.agent.args = [a + ",endpoint=" + engine.address if a.startswith("worker=w0,") else a
                    for a in c.agent.args]
    raw = []
    try:
        # The real agent and router work with only these rights.
        c.start()
        c.drive(100)
        want, _ = c.settle()
        c.check_matches()
        router = c.routers[0]
        for p in [c.agent, router]:
            assert "ermission" not in p.logs(), p.logs()
        node_b = RawNats(server.port, "agent-node-b", passwords["agent-node-b"])
        routers = RawNats(server.port, "router", passwords["router"])
        raw += [node_b, routers]
        model_token = "meta%2Fllama%203%2E1"  # MODEL through nats::EncodeToken
        payload = msgpack.packb({"v": 1, "events": []})
        # node-b may publish only as node-b.
        for subject in ["%s._agent.node-a" % PREFIX, "%s.%s.node-a" % (PREFIX, model_token),
                        "%s._expire.node-a" % PREFIX, "%s._expire.node-b" % PREFIX,
                        "$JS.API.STREAM.DELETE.%s" % STREAM, "$JS.API.STREAM.PURGE.%s" % STREAM,
                        "$JS.API.STREAM.UPDATE.%s" % STREAM, "_INBOX.forged",
                        "%s_load.node-a" % PREFIX]:
            errors = node_b.publish(subject, payload)
            assert refused(errors, subject), (subject, errors)
        # Routers may append expiry, never speak for an agent.
        for subject in ["%s._agent.node-a" % PREFIX, "%s.%s.node-a" % (PREFIX, model_token),
                        "$JS.API.STREAM.DELETE.%s" % STREAM, "_INBOX.forged",
                        "%s_load.node-a" % PREFIX]:
            errors = routers.publish(subject, payload)
            assert refused(errors, subject), (subject, errors)

        # node-a's own load samples reach the router (the agent's grant on
        # <prefix>_load.node-a, the router's on <prefix>_load.*).
        load_received = 'kvindex_router_epp_load_samples_total{outcome="received"}'
        e2e.wait_for(lambda: sample(router, load_received) >= 5, 10,
                     "the router receiving node-a's load samples")
        # Load samples node-b may publish (its own subject) about node-a's
        # worker, or naming node-a: the router keeps neither.
        load_refused = 'kvindex_router_epp_load_samples_total{outcome="refused"}'
        assert sample(router, load_refused) == 0
        busy = {"worker": "w0", "dp_rank": 0, "waiting": 99, "running": 99, "kv_use": 1.0,
                "healthy": False}
        for report in [{"v": 1, "agent": "node-b", "ts_ns": 1, "samples": [busy]},
                       {"v": 1, "agent": "node-a", "ts_ns": 1, "samples": [busy]}]:
            assert node_b.publish("%s_load.node-b" % PREFIX, msgpack.packb(report)) == []
        e2e.wait_for(lambda: sample(router, load_refused) == 2, 10,
                     "the router refusing node-b's load samples about node-a")
        # ... while node-a's own keep arriving.
        received = sample(router, load_received)
        e2e.wait_for(lambda: sample(router, load_received) >= received + 5, 10,
                     "node-a's load samples still received")

        # What node-b may publish, on its own subject, claiming to be node-a:
        # stored by JetStream, refused by the router, node-a untouched.
        forged = {"v": 1, "agent": "node-a", "incarnation": (1 << 64) - 1, "msg_seq": 1,
                  "events": [{"kind": "cleared", "model": td.MODEL, "worker": "w0",
                              "dp_rank": 0, "agent": "node-a", "event_id": 1, "ts_ns": 1}]}
        subject = "%s._agent.node-b" % PREFIX
        ack = node_b.request(subject, msgpack.packb(forged))
        assert ack.get("stream") == STREAM and ack.get("seq", 0) > 0, ack
        e2e.wait_for(lambda: router.state()["applied_seq"] >= ack["seq"], 30,
                     "the forged batch read")
        assert router.state()["digest"] == want, (router.state(), want)
        # node-a is not numbered into silence: its next batches still apply.
        c.drive(100)
        c.settle()
        c.check_matches()
        assert sample(router,
                      'kvindex_router_log_messages_refused_total{reason="subject_mismatch"}') == 1
        # The router appends node-a's expiry with its own rights, and applies it.
        c.agent.kill()
        e2e.wait_for(lambda: sample(
            router, 'kvindex_router_log_messages_total{outcome="agent_expired"}') == 1,
            30, "node-a expired by the router")
        assert sum(router.state()["entries"].values()) == 0, router.state()
        for p in [c.agent, router]:
            assert "ermission" not in p.logs(), p.logs()
        print("least_privilege: foreign subjects refused by nats-server; a forged header "
              "refused by the router; node-a served throughout, its own load samples "
              "received, forged ones refused")
    finally:
        for r in raw:
            r.close()
        engine.close()
        c.cleanup()


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
