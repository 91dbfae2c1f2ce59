#!/usr/bin/env python3
"""Distribution over NATS JetStream, end to end (issue: agents publish,
replicated routers converge, dead agents expire).

Real processes only: nats-server (one, or a 3-node JetStream cluster) on free
loopback ports, kvindex-agent --nats, kvindex-router --nats replicas, and an
embedded router fed the same engines as the reference truth. Every process is
stopped by its pid, also when a check fails.

Usage: test_distributed.py BIN_DIR SCENARIO
Scenarios: converge, nats_restart, cluster, agent_killed, late_router,
agent_returns, overflow, auth, tls
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nats_e2e as ne  # noqa: E402
from nats_e2e import e2e  # noqa: E402

B = 4
MODEL = "meta/llama 3.1"  # '/', ' ' and '.' exercise the subject token encoding


class Workload:
    """A mixed vLLM event stream for one engine: stored chains with tokens on
    GPU, placeholder offloads to CPU, stores on DISK, removals per tier, and
    rare AllBlocksCleared. Keeps the prompts it stored for match checks."""

    def __init__(self, engine, seed):
        self.engine = engine
        self.rng = random.Random(seed)
        self.held = {"GPU": [], "CPU": [], "DISK": []}  # engine hashes
        self.known = []  # engine hashes announced with tokens (placeholders resolve)
        self.next_hash = seed * 1_000_000 + 1
        self.prompts = []

    def _chain(self, blocks):
        tokens = [self.rng.randrange(1, 50000) for _ in range(blocks * B)]
        hashes = list(range(self.next_hash, self.next_hash + blocks))
        self.next_hash += blocks
        return tokens, hashes

    def batch(self):
        events = []
        for _ in range(self.rng.randrange(1, 6)):
            r = self.rng.random()
            if r < 0.45 or not self.known:
                tokens, hashes = self._chain(self.rng.randrange(1, 9))
                medium = "GPU" if self.rng.random() < 0.8 else "DISK"
                events.append(self.engine.stored(hashes, tokens, B, medium=medium))
                self.held[medium] += hashes
                self.known += hashes
                if len(self.prompts) < 64:
                    self.prompts.append(tokens)
            elif r < 0.65:
                pick = self.rng.sample(self.known, min(len(self.known), 3))
                events.append({"type": "BlockStored", "block_hashes": pick,
                               "parent_block_hash": None, "token_ids": [], "block_size": 0,
                               "lora_id": None, "medium": "CPU"}
                              if not self.engine.array_form else
                              ["BlockStored", pick, None, [], 0, None, "CPU", None,
                               None, None, None, None])
                self.held["CPU"] += pick
            elif r < 0.97:
                medium = self.rng.choice(["GPU", "CPU", "DISK"])
                if self.held[medium]:
                    n = min(len(self.held[medium]), self.rng.randrange(1, 4))
                    gone = [self.held[medium].pop(self.rng.randrange(len(self.held[medium])))
                            for _ in range(n)]
                    events.append(self.engine.removed(gone, medium=medium))
            else:
                events.append(self.engine.cleared())
                self.held = {"GPU": [], "CPU": [], "DISK": []}
                self.known = []
        self.engine.publish(events)

    def run(self, batches, pause_every=50, pause=0.002):
        for i in range(batches):
            self.batch()
            if i % pause_every == 0:
                time.sleep(pause)


class Cluster:
    """Engines + agent + NATS routers + the embedded reference router."""

    def __init__(self, bin_dir, servers, agent_extra=(), router_extra=(), routers=2,
                 lease="30s"):
        self.bin_dir = bin_dir
        self.servers = servers
        self.url = ",".join(s.url for s in servers)
        self.ctx = zmq.Context()
        self.engines = [e2e.Engine(self.ctx), e2e.Engine(self.ctx, dp_rank=1, array_form=True)]
        self.workers = ["w0", "w1"]
        self.sources = [e.source(w, MODEL, B) for e, w in zip(self.engines, self.workers)]
        self.agent_port = e2e.free_port()
        self.agent_extra = ["--http", "127.0.0.1:%d" % self.agent_port, "--lease", lease,
                            "--heartbeat-interval", "250ms"] + list(agent_extra)
        self.agent = ne.Agent(bin_dir, self.url, "node-a", self.sources, self.agent_extra)
        self.router_extra = list(router_extra)
        self.routers = [ne.NatsRouter(bin_dir, self.url, self.router_extra)
                        for _ in range(routers)]
        self.reference = e2e.Router(bin_dir, self.sources)
        self.loads = [Workload(self.engines[0], 1), Workload(self.engines[1], 2)]
        self.extra = []

    def start(self):
        for r in self.routers:
            r.start()
        self.agent.start()
        self.reference.start()
        for r in self.routers:
            r.wait_ready(60)
        self.reference.wait_ready(30)
        e2e.wait_for(self.agent_ready, 30, "agent /readyz")
        return self

    def agent_ready(self):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.agent_port, timeout=2)
        try:
            conn.request("GET", "/readyz")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    def agent_metrics(self):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", self.agent_port, timeout=2)
        try:
            conn.request("GET", "/metrics")
            return conn.getresponse().read().decode()
        finally:
            conn.close()

    def drive(self, batches):
        for _ in range(batches // 50):
            for load in self.loads:
                load.run(50)

    def settle(self, routers=None, timeout=60):
        """Nudges the engines until every router equals the reference, once
        the reference has read each engine up to the nudge: a reference and
        routers equally behind (a live batch lost to a slow joiner and not
        yet replayed, batches still in flight on a loaded machine) are not
        settled."""
        routers = routers or self.routers
        deadline = time.monotonic() + timeout
        while True:
            marks = [engine.nudge() for engine in self.engines]
            # The nudge applied means every batch before it reached the
            # reference's in-process log (one source thread, in order);
            # lag_messages 0, that the log is in its index.
            reference = self.reference.json("GET", "/v1/state") if self.reference_read(marks) \
                else None
            if reference and reference["lag_messages"] == 0:
                want = reference["digest"]
                try:
                    states = ne.same_digest(routers, want, timeout=3)
                    # Between two nudges the engines may have published
                    # again (a background load): the reference must not
                    # have moved on from the digest the routers reached.
                    if self.reference.json("GET", "/v1/state")["digest"] == want:
                        return want, states
                except AssertionError:
                    pass
            else:
                time.sleep(0.1)
            if time.monotonic() > deadline:
                raise AssertionError("routers %s, reference %s" % (
                    [r.state() for r in routers], self.reference.json("GET", "/v1/state")))

    def reference_read(self, marks, timeout=3):
        """True once the reference applied every engine's batches up to
        marks[i] (its kvindex_agent_last_sequence per source)."""
        series = ['kvindex_agent_last_sequence{source="%s/%d"}' % (worker, engine.dp_rank)
                  for worker, engine in zip(self.workers, self.engines)]

        def read(s, mark):
            value = self.reference.sample(s)
            return value is not None and value >= mark
        try:
            e2e.wait_for(lambda: all(read(s, mark) for s, mark in zip(series, marks)), timeout,
                         "the reference at the nudge")
            return True
        except AssertionError:
            return False

    def check_matches(self, routers=None):
        routers = routers or self.routers
        prompts = self.loads[0].prompts[:16] + self.loads[1].prompts[:16]
        for tokens in prompts:
            body = {"model": MODEL, "tokens": tokens}
            want = self.reference.match(body)["workers"]
            for r in routers:
                got = r.match(body)["workers"]
                assert got == want, (got, want)

    def cleanup(self):
        for p in [self.agent, self.reference] + self.routers + self.extra:
            try:
                p.cleanup()
            except Exception as error:  # keep stopping the others
                print("cleanup:", error)
        for engine in self.engines:
            engine.close()
        for s in self.servers:
            s.cleanup()
        self.ctx.term()


def scenario_converge(bin_dir):
    """(a) one agent, two routers, a mixed stream: equal digests and answers,
    equal to the embedded router fed the same engines."""
    c = Cluster(bin_dir, [ne.NatsServer().start()])
    try:
        c.start()
        c.drive(600)
        digest, states = c.settle()
        assert states[0]["entries"]["device"] > 0 and states[0]["entries"]["host"] > 0, states
        assert states[0]["entries"]["disk"] > 0, states
        c.check_matches()
        print("converge: digest %s at applied_seq %d, entries %s" % (
            digest, states[0]["applied_seq"], states[0]["entries"]))
    finally:
        c.cleanup()


def scenario_nats_restart(bin_dir):
    """(b) nats-server killed and restarted mid-stream (file storage)."""
    server = ne.NatsServer().start()
    c = Cluster(bin_dir, [server])
    try:
        c.start()
        c.drive(300)
        server.kill()
        c.drive(200)  # published while NATS is down: buffered by the agent
        time.sleep(1)
        server.start()
        c.drive(300)
        digest, states = c.settle(timeout=90)
        c.check_matches()
        print("nats_restart: digest %s at applied_seq %d" % (digest, states[0]["applied_seq"]))
    finally:
        c.cleanup()


def scenario_cluster(bin_dir):
    """(c) a 3-node JetStream cluster, R3 stream, one server killed mid-stream."""
    cps = [e2e.free_port() for _ in range(3)]
    servers = [ne.NatsServer("n%d" % i, cps[i], [cps[j] for j in range(3) if j != i])
               for i in range(3)]
    for s in servers:
        s.start()
    c = Cluster(bin_dir, servers, agent_extra=["--stream-replicas", "3"],
                router_extra=["--stream-replicas", "3"])
    try:
        c.start()
        c.drive(300)
        servers[0].kill()
        c.drive(300)
        digest, states = c.settle(timeout=120)
        c.check_matches()
        print("cluster: digest %s at applied_seq %d with n0 down" % (digest,
                                                                     states[0]["applied_seq"]))
    finally:
        c.cleanup()


def scenario_agent_killed(bin_dir):
    """(d) an agent killed: its sources expire on both routers at the same
    applied_seq."""
    c = Cluster(bin_dir, [ne.NatsServer().start()], lease="2s")
    try:
        c.start()
        c.drive(200)
        c.settle()
        c.agent.kill()
        states = ne.wait_state(c.routers, lambda ss: all(sum(s["entries"].values()) == 0
                                                         for s in ss), 30,
                               "the dead agent's entries gone")
        states = ne.same_digest(c.routers)
        assert states[0]["digest"] == e2e.digest([]), states
        for r in c.routers:
            text = r.request("GET", "/metrics")[2]
            assert 'kvindex_router_log_messages_total{outcome="agent_expired"} 1' in text, text
        print("agent_killed: expired at applied_seq %d on both routers" %
              states[0]["applied_seq"])
    finally:
        c.cleanup()


def scenario_late_router(bin_dir):
    """(e) a router started after 100k+ events catches up to the same digest."""
    c = Cluster(bin_dir, [ne.NatsServer().start()])
    try:
        c.start()
        before = c.routers[0].state()["applied_seq"]
        events = 0
        while events < 100_000:
            c.drive(500)
            text = c.routers[0].request("GET", "/metrics")[2]
            events = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("kvindex_router_events_applied_total{"))
        digest, _ = c.settle()
        late = ne.NatsRouter(bin_dir, c.url)
        c.extra.append(late)
        start = time.monotonic()
        late.start().wait_ready(120)
        elapsed = time.monotonic() - start
        digest, states = c.settle(c.routers + [late])
        print("late_router: %d events (log positions %d..%d) replayed to ready in %.2fs, "
              "digest %s" % (events, before, states[0]["applied_seq"], elapsed, digest))
    finally:
        c.cleanup()


def scenario_agent_returns(bin_dir):
    """(f) an expired agent that comes back restores exactly its sources."""
    c = Cluster(bin_dir, [ne.NatsServer().start()], lease="2s")
    try:
        c.start()
        c.drive(200)
        want, _ = c.settle()
        c.agent.send_signal(signal.SIGSTOP)
        ne.wait_state(c.routers, lambda ss: all(sum(s["entries"].values()) == 0 for s in ss),
                      30, "the silent agent's entries gone")
        c.agent.send_signal(signal.SIGCONT)
        digest, states = c.settle(timeout=60)
        assert digest == want
        c.drive(100)
        digest, states = c.settle()
        c.check_matches()
        snapshots = [l for l in c.agent_metrics().splitlines()
                     if l.startswith("kvindex_agent_snapshots_total")]
        assert snapshots and float(snapshots[0].split()[-1]) >= 2, snapshots  # both sources
        print("agent_returns: restored to %s at applied_seq %d" % (digest,
                                                                 states[0]["applied_seq"]))
    finally:
        c.cleanup()


def scenario_overflow(bin_dir):
    """(g) NATS unreachable long enough to overflow the agent's buffer: after
    recovery the affected sources equal the engines' truth."""
    server = ne.NatsServer().start()
    c = Cluster(bin_dir, [server],
                agent_extra=["--batch-bytes", "4096", "--buffer-bytes", "16384"])
    try:
        c.start()
        c.drive(200)
        c.settle()
        server.kill()
        c.drive(600)
        server.start()
        digest, states = c.settle(timeout=90)
        c.check_matches()
        metrics = c.agent_metrics()
        overflowed = [l for l in metrics.splitlines()
                      if l.startswith("kvindex_agent_nats_events_overflowed_total")]
        assert overflowed and float(overflowed[0].split()[-1]) > 0, overflowed
        print("overflow: %s; recovered to %s" % (overflowed[0], digest))
    finally:
        c.cleanup()


def scenario_auth(bin_dir):
    """(h) user/password and token auth: clients without or with wrong
    credentials are rejected, counted and not ready (never an exit); no
    secret appears in any log."""
    password = "s3cret-pass-%d" % os.getpid()
    server = ne.NatsServer(config='authorization { user: kv, password: "%s" }\n' % password)
    server.start()
    tmp = server.dir
    good = os.path.join(tmp, "password")
    bad = os.path.join(tmp, "wrong")
    with open(good, "w") as f:
        f.write(password + "\n")
    with open(bad, "w") as f:
        f.write("not-" + password + "\n")
    procs = []
    try:
        # Without credentials and with a wrong password: rejected and
        # counted, not ready, but running (retrying with the files read
        # again: test_credential_rotation.py), and stopped cleanly.
        for extra in ([], ["--nats-user", "kv", "--nats-password-file", bad]):
            r = ne.NatsRouter(bin_dir, server.url, extra)
            procs.append(r)
            r.start()
            e2e.wait_for(lambda: r.proc.poll() is None and
                         r.metric("kvindex_nats_auth_failures_total") >= 1, 30,
                         "refusals counted")
            status, _, body = r.request("GET", "/readyz")
            assert status == 503 and "credentials" in body, (status, body)
            assert r.stop() == 0
            logs = r.logs()
            assert any(w in logs for w in ("uthoriz", "uthenticat", "ermission")), logs
            assert password not in logs
        # The right password from a file, and from the environment.
        c = Cluster(bin_dir, [server], agent_extra=["--nats-user", "kv",
                                                    "--nats-password-file", good],
                    router_extra=["--nats-user", "kv"], routers=1)
        c.routers[0].env["KVINDEX_NATS_PASSWORD"] = password
        c.servers = []  # the server is cleaned up below
        try:
            c.start()
            c.drive(100)
            c.settle()
            for p in [c.agent] + c.routers:
                assert password not in p.logs(), p.logs()
        finally:
            c.cleanup()
        print("auth: wrong and missing credentials rejected; right ones served")
    finally:
        for p in procs:
            p.cleanup()
        server.cleanup()


def make_certs(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate,
    made with the openssl CLI (Debian openssl)."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), check=True, cwd=directory,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=kvindex-ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=%s" % name,
                "-keyout", name + ".key", "-out", name + ".csr")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", name + ".pem")
    return {n: os.path.join(directory, n) for n in
            ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


def scenario_tls(bin_dir):
    """(h) TLS with client certificates: a client without its certificate is
    rejected; agent and routers with CA, certificate and key converge."""
    import tempfile
    certs_dir = tempfile.mkdtemp(prefix="kvindex-certs-")
    certs = make_certs(certs_dir)
    server = ne.NatsServer(config=(
        'tls {\n  cert_file: "%s"\n  key_file: "%s"\n  ca_file: "%s"\n  verify: true\n}\n' %
        (certs["server.pem"], certs["server.key"], certs["ca.pem"])))
    server.start()
    with_ca = ["--nats-tls-ca", certs["ca.pem"]]
    with_cert = with_ca + ["--nats-tls-cert", certs["client.pem"], "--nats-tls-key",
                           certs["client.key"]]
    rejected = ne.NatsRouter(bin_dir, server.url, with_ca)
    try:
        rejected.start()
        code = rejected.proc.wait(timeout=30)
        assert code != 0, rejected.logs()
        c = Cluster(bin_dir, [server], agent_extra=with_cert, router_extra=with_cert, routers=2)
        c.servers = []  # the server is cleaned up below
        try:
            c.start()
            c.drive(200)
            digest, _ = c.settle()
            c.check_matches()
        finally:
            c.cleanup()
        print("tls: a client without its certificate rejected; with it, digest %s" % digest)
    finally:
        rejected.cleanup()
        server.cleanup()
        shutil.rmtree(certs_dir, ignore_errors=True)


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
