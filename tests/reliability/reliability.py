#!/usr/bin/env python3
"""The reliability suite (issue #25): a fault matrix and a soak against the
simulated cluster's ground truth. docs/reliability.md has the table of cases.

Topology, started once and shared by every case of a run:
  - kvindex-mockengine: the mixed fleet of tests/simulation (vLLM map and
    array forms, SGLang, TensorRT-LLM, DP ranks, two models, device/host/disk
    tiers), one run ("epoch") per case; a new epoch is an engine restart of
    every source (seq back to 0), which the agents clear.
  - two kvindex-agent: node-a (workers 0-3), node-b (workers 4-7);
  - a 3-node JetStream cluster, R3 stream, with the least-privilege
    permissions of docs/operations.md (tests/distributed/test_least_privilege);
  - three kvindex-router --nats with checkpoints: router 0, router 1 (its
    data dir on a small tmpfs), router 2.
Everything runs in a private network namespace (lo: 127.0.0.1/32).
Router 2 and agent node-b live in their own namespaces ("islands") joined to
it by veth pairs with 127.77.x.y addresses; a partition takes a veth down.

Every case injects its fault while the simulator publishes, heals, lets the
epoch finish and asserts: every router's digest equals the truth's
`stored_since_clear_digest` (what semantics.md lets the index hold: the
truth, except what a simulated fault made the agent clear), all routers at
the same applied_seq, per source and tier the entries the truth allows, the
/v1/match answers the truth allows, no message refused by the routers or by
nats-server (least privilege), and nothing applied twice: routers 0 and 2,
never restarted, applied exactly the same number of events at the same
applied_seq.

Usage: reliability.py BIN_DIR matrix [--cases a,b,...]
       reliability.py BIN_DIR soak --duration SECONDS [--rate R] [--seed N]
Root is needed (network namespaces, tmpfs). Exit 0 when every check held.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "simulation"))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import nats_e2e as ne  # noqa: E402
import test_least_privilege as lp  # noqa: E402
import test_simulation as ts  # noqa: E402
from nats_e2e import e2e  # noqa: E402

LEASE_S = 2
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# glibc returns freed blocks of 128 KiB and more to the system at once (no
# dynamic mmap threshold, heap top trimmed): RSS then shows live memory, not
# the high-water mark of a catch-up burst (JetStream messages here are
# ~190 KB), so the soak's RSS bound measures retention, not the allocator.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
STREAM = lp.STREAM
CKPT_FAST = ["--checkpoint-interval", "200ms"]
NODES = {"node-a": range(0, 4), "node-b": range(4, 8)}  # worker indexes per agent
# veth pairs: (name suffix, island, main side address, island side address)
LINKS = {"router_nats": ("r", "127.77.1.1", "127.77.1.2"),
         "agent_nats": ("a", "127.77.2.1", "127.77.2.2"),
         "agent_engines": ("a", "127.77.3.1", "127.77.3.2")}


def ip(*args):
    subprocess.run(["ip"] + list(args), check=True, timeout=20)


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


T0 = time.monotonic()


# --- namespaces (set up by the parent process, which re-runs this file inside) -----

def namespaces_setup(tag):
    names = {"main": "kvrel%s" % tag, "r": "kvrel%sr" % tag, "a": "kvrel%sa" % tag}
    for ns in names.values():
        ip("netns", "add", ns)
        # lo holds 127.0.0.1 only, so the rest of 127/8 can route over veth;
        # route_localnet lets 127.x cross a non-loopback interface.
        script = ("ip link set lo up && ip addr del 127.0.0.1/8 dev lo && "
                  "ip addr add 127.0.0.1/32 dev lo && "
                  "sysctl -qw net.ipv4.conf.all.route_localnet=1")
        subprocess.run(["ip", "netns", "exec", ns, "sh", "-c", script], check=True, timeout=20)
    for i, (link, (island, main_addr, island_addr)) in enumerate(sorted(LINKS.items())):
        host_if, peer_if = "kvm%d" % i, "kvi%d" % i
        ip("-n", names["main"], "link", "add", host_if, "type", "veth", "peer", "name", peer_if,
           "netns", names[island])
        for ns, dev, addr in ((names["main"], host_if, main_addr),
                              (names[island], peer_if, island_addr)):
            ip("-n", ns, "addr", "add", addr + "/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                            "net.ipv4.conf.%s.route_localnet=1" % dev], check=True, timeout=20)
    return names


def run_in_namespaces(argv):
    """Sets up the namespaces, runs this file in the main one, removes them."""
    tag = str(os.getpid())
    names = {}
    child = None
    try:
        names = namespaces_setup(tag)
        env = dict(os.environ, KVREL_NS_MAIN=names["main"], KVREL_NS_R=names["r"],
                   KVREL_NS_A=names["a"])
        child = subprocess.Popen(["ip", "netns", "exec", names["main"], sys.executable,
                                  os.path.abspath(__file__)] + argv[1:], env=env)

        def forward(sig, _):
            child.send_signal(sig)
        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        return child.wait()
    finally:
        for ns in names.values():
            # Our child's processes only (it stops them by pid; this is the
            # backstop for a child that was itself killed).
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], check=False)


class Island:
    """A namespace of the run: wraps commands to run in it."""

    def __init__(self, name):
        self.name = name

    def wrap(self, args):
        return ["ip", "netns", "exec", self.name] + list(args)


def link_set(link, state):
    """A partition (down) or its healing (up): the main side of a veth pair."""
    index = sorted(LINKS).index(link)
    ip("link", "set", "kvm%d" % index, state)


# --- small helpers --------------------------------------------------------------------

def replace_arg(args, flag, value):
    args = list(args)
    args[args.index(flag) + 1] = value
    return args


def http_get(host, port, path):
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def metric_sum(text, name):
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


class AgentProc(ne.Agent):
    """kvindex-agent with its HTTP on a known address (metrics, readiness)."""

    def __init__(self, bin_dir, url, node, sources, extra, http_host, island=None):
        self.http_host = http_host
        self.http_port = e2e.free_port()
        super().__init__(bin_dir, url, node, sources,
                         list(extra) + ["--http", "%s:%d" % (http_host, self.http_port)],
                         env=MALLOC_ENV)
        if island is not None:
            self.args = island.wrap(self.args)

    def ready(self):
        return http_get(self.http_host, self.http_port, "/readyz")[0] == 200

    def metric(self, name):
        return metric_sum(http_get(self.http_host, self.http_port, "/metrics")[1], name)

    def start(self):
        # Appends: a restart keeps the previous run's log (--keep-logs).
        self.out = open(os.path.join(self.dir, "stdout"), "a")
        self.err = open(os.path.join(self.dir, "stderr"), "a")
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=self.out, stderr=self.err)
        return self

    def restart(self, env=None):
        self.kill()
        if env is not None:
            self.env = dict(os.environ, **MALLOC_ENV, **env)
        self.start()
        # It replays every engine's buffer (up to 10,000 batches each) first:
        # after a long epoch that takes tens of seconds on 2 cores.
        e2e.wait_for(self.ready, 120, "agent /readyz after a restart")


# --- the topology ------------------------------------------------------------------------

class Topology:
    def __init__(self, bin_dir, rate, limit, seed):
        self.bin_dir = bin_dir
        self.rate, self.limit, self.seed = rate, limit, seed
        self.islands = {"r": Island(os.environ["KVREL_NS_R"]),
                        "a": Island(os.environ["KVREL_NS_A"])}
        self.tmp = tempfile.mkdtemp(prefix="kvindex-reliability-")
        self.tmpfs = os.path.join(self.tmp, "tmpfs")
        os.mkdir(self.tmpfs)
        self.servers, self.agents, self.routers, self.extra_routers = [], {}, [], []
        self.sim = None
        self.epoch = 0
        self.last_digest = None
        self.admin_lock = threading.Lock()
        self.ports = ts.free_ports()
        self.probe = ts.Simulator(bin_dir, [])
        self.sources = self.probe.sources(ts.fleet(self.ports))
        assert len(self.sources) == 8, self.sources
        self.passwords = {name: "pw-%s-%d" % (name, os.getpid())
                          for name in ("agent-node-a", "agent-node-b", "router", "admin")}
        self.password_files = {}
        for name, password in self.passwords.items():
            path = os.path.join(self.tmp, name + ".password")
            with open(path, "w") as f:
                f.write(password + "\n")
            self.password_files[name] = path

    # NATS -------------------------------------------------------------------------
    def server_config(self):
        """docs/operations.md's least privilege, plus an admin user for the
        driver itself (stream info, leader step-down)."""
        users = {k: v for k, v in self.passwords.items() if k != "admin"}
        config = lp.server_config(users)
        admin = '    { user: "admin", password: "%s" }' % self.passwords["admin"]
        head, tail = config.rsplit("\n  ]\n}", 1)
        return head + "\n" + admin + "\n  ]\n}" + tail

    def urls(self, host):
        return ",".join("nats://%s:%d" % (host, s.port) for s in self.servers)

    def admin(self, server=None):
        for s in ([server] if server else self.servers):
            if s.proc is None:
                continue
            try:
                return lp.RawNats(s.port, "admin", self.passwords["admin"])
            except (OSError, AssertionError):
                continue
        raise AssertionError("no NATS server accepts the admin")

    def admin_request(self, subject):
        """One JetStream API request as the admin. Serialized: RawNats's
        reply inbox is per process, so concurrent requests (the soak's
        sampler) would read each other's answers."""
        with self.admin_lock:
            raw = self.admin()
            try:
                return raw.request(subject, b"")
            finally:
                raw.close()

    def stream_info(self):
        def info():
            answer = self.admin_request("$JS.API.STREAM.INFO." + STREAM)
            return answer if "error" not in answer and answer.get("cluster", {}).get(
                "leader") else None
        return e2e.wait_for(info, 30, "stream info with a leader")

    # start --------------------------------------------------------------------------
    def start(self):
        cps = [e2e.free_port() for _ in range(3)]
        config = self.server_config()
        for i in range(3):
            s = ne.NatsServer("n%d" % i, cps[i], [cps[j] for j in range(3) if j != i],
                              config=config)
            s.args = replace_arg(s.args, "-a", "0.0.0.0")  # islands reach it over veth
            self.servers.append(s)
        for s in self.servers:
            s.start()
        main_url = self.urls("127.0.0.1")
        # Retention bounds the soak's disk use (the stream takes ~8 MB/s);
        # a router behind it resyncs (checkpoint_retention covers that).
        common = ["--stream-replicas", "3", "--stream-max-age", "5m"]
        router_extra = common + CKPT_FAST + ["--models", ",".join(ts.MODELS), "--nats-user",
                                             "router", "--nats-password-file",
                                             self.password_files["router"]]
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", self.tmpfs],
                       check=True, timeout=20)
        self.routers = [ne.NatsRouter(self.bin_dir, main_url, router_extra, env=MALLOC_ENV),
                        ne.NatsRouter(self.bin_dir, main_url, router_extra, env=MALLOC_ENV,
                                      data_dir=os.path.join(self.tmpfs, "r1")),
                        ne.NatsRouter(self.bin_dir, self.urls(LINKS["router_nats"][1]),
                                      router_extra, env=MALLOC_ENV)]
        island_router = self.routers[2]
        island_router.host = LINKS["router_nats"][2]
        island_router.args = self.islands["r"].wrap(
            replace_arg(island_router.args, "--http", "%s:%d" % (island_router.host,
                                                                 island_router.port)))
        for r in self.routers:
            r.start()
        for r in self.routers:
            r.wait_ready(60)
        for node, workers in NODES.items():
            user = "agent-" + node
            extra = common + ts.NO_REPLAY_COOLDOWN + [
                "--lease", "%ds" % LEASE_S, "--heartbeat-interval", "500ms",
                "--nats-user", user, "--nats-password-file", self.password_files[user]]
            sources = [self.sources[w] for w in workers]
            if node == "node-b":
                engines = LINKS["agent_engines"][1]
                sources = [s.replace("127.0.0.1", engines) for s in sources]
                agent = AgentProc(self.bin_dir, self.urls(LINKS["agent_nats"][1]), node, sources,
                                  extra, LINKS["agent_engines"][2], self.islands["a"])
            else:
                agent = AgentProc(self.bin_dir, main_url, node, sources, extra, "127.0.0.1")
            self.agents[node] = agent.start()
        for agent in self.agents.values():
            e2e.wait_for(agent.ready, 30, "agent /readyz")
        info = self.stream_info()
        assert info["config"]["num_replicas"] == 3, info["config"]
        log("topology up: 3 NATS servers (R3 stream, leader %s), 2 agents, 3 routers" %
            info["cluster"]["leader"])
        return self

    # epochs of the simulator --------------------------------------------------------------
    def start_epoch(self, extra=(), limit=None, rate=None):
        self.epoch += 1
        limit = limit or self.limit
        # Random placement seeded per epoch: every epoch ends on another truth.
        args = ts.fleet(self.ports, ["--policy", "random", "--host", "0.0.0.0"] +
                        list(extra))
        args = replace_arg(args, "--limit", str(limit))
        args = replace_arg(args, "--rate", str(rate or self.rate))
        args = replace_arg(args, "--seed", str(self.seed + self.epoch))
        self.sim = ts.Simulator(self.bin_dir, args).start()
        self.sim_limit = limit
        return self.sim

    def progress(self):
        return self.sim.json("GET", "/v1/progress")

    def wait_fraction(self, fraction, timeout=60):
        def reached():
            if self.sim.proc.poll() is not None:
                raise AssertionError("mockengine exited: %s" % self.sim.logs()[-2000:])
            p = self.progress()
            return p["requests_done"] >= fraction * p["requests_total"]
        e2e.wait_for(reached, timeout, "%.0f%% of the epoch served" % (100 * fraction))

    def finish_epoch(self, timeout=90):
        """Waits for the simulator, checks every router against its truth."""
        progress = self.sim.wait_done(timeout)
        log("epoch %d served" % self.epoch)
        truth = self.sim.json("GET", "/v1/truth")
        checked = self.check_exact(truth)
        assert self.sim.stop() == 0, self.sim.logs()[-3000:]
        self.sim.cleanup()
        self.sim = None
        checked["faults"] = progress["report"]["faults"]
        return checked

    # checks ------------------------------------------------------------------------------
    def all_routers(self):
        return self.routers + self.extra_routers

    def check_exact(self, truth, timeout=60):
        want = truth["stored_since_clear_digest"]
        # A router that missed the whole epoch would still hold the last one.
        assert want != self.last_digest, "two epochs with the same truth %s" % want
        self.last_digest = want
        routers = self.all_routers()
        try:
            states = ne.same_digest(routers, want, timeout=timeout)
            self.exact_at = time.monotonic()
        except AssertionError:
            raise AssertionError("routers %s, truth %s (digest %s)" % (
                [r.state() for r in routers], want, truth["digest"]))
        requests = ts.read_trace(self.sim_limit)
        compared = sum(ts.check_router(r, truth, requests) for r in routers)
        for r in routers:
            refused = r.metric("kvindex_router_log_messages_refused_total")
            assert refused == 0, "router on port %d refused %d messages" % (r.port, refused)
        for s in self.servers:
            with open(os.path.join(s.dir, "server.log")) as f:
                assert "Permissions Violation" not in f.read(), "a NATS permission violation"
        applied = self.applied_once()
        cleared = [s for s in truth["sources"] if s["cleared_by_fault"]]
        if os.environ.get("KVREL_VERBOSE"):
            self.dump_logs()
        return {"digest": want, "applied_seq": states[0]["applied_seq"],
                "entries": sum(states[0]["entries"].values()), "matches": compared,
                "cleared_sources": len(cleared), "events_applied": applied}

    def applied_once(self, timeout=30):
        """Routers 0 and 2 ran without a restart since the start: at the
        same applied_seq they applied exactly as many events (a message
        applied twice, e.g. redelivered after a reconnect, would count twice)."""
        a, b = self.routers[0], self.routers[2]

        def snapshot():
            s = [a.state()["applied_seq"], b.state()["applied_seq"]]
            m = [a.metric("kvindex_router_events_applied_total"),
                 b.metric("kvindex_router_events_applied_total")]
            s2 = [a.state()["applied_seq"], b.state()["applied_seq"]]
            return (m, s) if s == s2 and s[0] == s[1] else None
        m, _ = e2e.wait_for(snapshot, timeout, "routers 0 and 2 at one applied_seq")
        assert m[0] == m[1], "events applied: router 0 %d, router 2 %d" % (m[0], m[1])
        return int(m[0])

    def entries_of(self, router, node):
        workers = {"w%d" % i for i in NODES[node]}
        return sum(sum(w["entries"].values()) for w in router.json("GET", "/v1/workers")["workers"]
                   if w["worker"] in workers)

    def expiries(self, routers):
        return [lp.sample(r, 'kvindex_router_log_messages_total{outcome="agent_expired"}')
                for r in routers]

    def wait_expired(self, node, routers, before, timeout=30):
        """Until every router applied one more expiry than `before` and holds
        nothing of `node`'s sources."""
        e2e.wait_for(lambda: all(n > b for n, b in zip(self.expiries(routers), before)) and
                     all(self.entries_of(r, node) == 0 for r in routers), timeout,
                     "%s's sources expired on %d routers" % (node, len(routers)))

    def rss(self):
        out = {}
        for i, r in enumerate(self.all_routers()):
            if r.proc is not None:
                out["router%d" % i] = (r.proc.pid, e2e.rss_mb(r.proc.pid))
        for node, a in self.agents.items():
            if a.proc is not None:
                out["agent-" + node] = (a.proc.pid, e2e.rss_mb(a.proc.pid))
        for s in self.servers:
            if s.proc is not None:
                out["nats-" + s.args[s.args.index("-n") + 1]] = (s.proc.pid, e2e.rss_mb(s.proc.pid))
        if self.sim is not None and self.sim.proc is not None:
            out["mockengine"] = (self.sim.proc.pid, e2e.rss_mb(self.sim.proc.pid))
        return out

    def cleanup(self):
        procs = ([self.sim] if self.sim else []) + list(self.agents.values()) + self.routers + \
            self.extra_routers
        for p in procs:
            try:
                p.cleanup()
            except Exception as error:  # keep stopping the others
                print("cleanup:", error)
        for s in self.servers:
            s.cleanup()
        self.probe.cleanup()
        subprocess.run(["umount", "-l", self.tmpfs], check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def keep_logs(self, out):
        """Diagnostics (--keep-logs DIR): every process's whole log, and what
        the routers, agents and the simulator's truth say now, copied to
        `out` before the temp dirs go."""
        os.makedirs(out, exist_ok=True)

        def save(name, text):
            with open(os.path.join(out, name), "w") as f:
                f.write(text)

        def grab(name, fetch):
            try:
                save(name, fetch())
            except Exception as error:  # keep the rest
                save(name, "unavailable: %r\n" % error)
        for i, r in enumerate(self.all_routers()):
            grab("router%d.log" % i, r.logs)
            grab("router%d.state.json" % i, lambda r=r: json.dumps(r.state(), indent=1))
            grab("router%d.workers.json" % i,
                 lambda r=r: json.dumps(r.json("GET", "/v1/workers"), indent=1))
            grab("router%d.metrics" % i, lambda r=r: r.request("GET", "/metrics")[2])
        for node, a in self.agents.items():
            grab("agent-%s.log" % node, a.logs)
            grab("agent-%s.metrics" % node,
                 lambda a=a: http_get(a.http_host, a.http_port, "/metrics")[1])
        for s in self.servers:
            grab("nats-%s.log" % s.args[s.args.index("-n") + 1],
                 lambda s=s: open(os.path.join(s.dir, "server.log")).read())
        if self.sim is not None:
            grab("mockengine.log", self.sim.logs)
            grab("truth.json", lambda: json.dumps(self.sim.json("GET", "/v1/truth"), indent=1))
            grab("progress.json", lambda: json.dumps(self.progress(), indent=1))
        log("logs kept in %s" % out)

    def dump_logs(self):
        named = {"router%d" % i: r for i, r in enumerate(self.all_routers())}
        named.update({"agent-" + n: a for n, a in self.agents.items()})
        for name, p in named.items():
            try:
                print("--- %s (last 25 lines)\n%s" % (name, "\n".join(p.logs().splitlines()[-25:])))
            except OSError:
                pass


# --- the fault matrix -----------------------------------------------------------------
# Each case: inject(t) runs once the epoch is 30 % served, and returns healed.
# It returns a dict of what it saw, for the report.

def restart_router(r, env=None):
    r.kill9()
    if env is not None:
        r.env = dict(os.environ, **MALLOC_ENV, **env)
    r.start().wait_ready(60)


def restored(r):
    return r.logs().count("restored checkpoint")


def case_router_kill_apply(t):
    """kill -9 of a router while it applies; restarts from its checkpoint."""
    r = t.routers[1]
    before = restored(r)
    restart_router(r)
    assert restored(r) == before + 1, r.logs()[-2000:]
    return {"restored_from_checkpoint": True}


def case_router_kill_checkpoint(t):
    """kill -9 of a router while it writes a checkpoint (its ingest file
    exists), three times."""
    r = t.routers[1]
    ingest = os.path.join(r.data_dir, "checkpoints.ingest")
    caught = 0
    for _ in range(3):
        deadline = time.monotonic() + 2
        hit = False
        while time.monotonic() < deadline:
            try:
                if any(n.endswith(".sst") for n in os.listdir(ingest)):
                    hit = True
                    break
            except FileNotFoundError:
                pass
            time.sleep(0.0005)
        restart_router(r)
        caught += hit
    assert caught >= 1, "no kill landed during a checkpoint write"
    return {"kills": 3, "during_checkpoint_write": caught}


class SlowPeer:
    """A loopback TCP forwarder to a bootstrap peer that, while `slow`,
    passes the peer's answer on at `rate` bytes/s: a checkpoint fetched
    through it takes seconds (~350 KB here), so a kill lands inside the
    bootstrap however fast the machine."""

    def __init__(self, port, rate=256 * 1024):
        self.target, self.rate, self.slow = port, rate, True
        self.answered = 0  # bytes of the peer's answers passed on
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:  # closed
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError as error:  # the peer is down: this client sees a reset
                log("SlowPeer: %s" % error)
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True),
                             daemon=True).start()

    def _pump(self, src, dst, answer):
        try:
            while True:
                data = src.recv(4096 if answer and self.slow else 65536)
                if not data:
                    break
                dst.sendall(data)
                if answer:
                    self.answered += len(data)
                    if self.slow:
                        time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.listener.close()


def case_router_kill_bootstrap(t):
    """kill -9 of a new router while it bootstraps from a peer's checkpoint;
    restarted on the same data dir, it serves exactly. The first kill lands
    in the checkpoint's transfer (slowed by a forwarder), the second after a
    random delay (in the transfer, the import or after it)."""
    rng = random.Random(t.seed)
    peer = SlowPeer(t.routers[0].port)
    killed_before = []
    try:
        for i in range(2):
            peer.slow, peer.answered = i == 0, 0
            fresh = ne.NatsRouter(t.bin_dir, t.urls("127.0.0.1"),
                                  t.routers[0].args[t.routers[0].args.index("--stream-replicas"):] +
                                  ["--bootstrap-from", "http://127.0.0.1:%d" % peer.port])
            t.extra_routers.append(fresh)
            fresh.start()
            if peer.slow:
                e2e.wait_for(lambda: peer.answered >= 16 * 1024, 30,
                             "16 KB of the peer's checkpoint passed on")
            else:
                time.sleep(rng.uniform(0.01, 0.3))
            fresh.kill9()
            killed_before.append("bootstrapped from" not in fresh.logs())
            peer.slow = False
            fresh.start().wait_ready(60)
    finally:
        peer.close()
    assert killed_before[0], "the kill in the slowed transfer came after the bootstrap"
    size = re.findall(r"bootstrapped from \S+: checkpoint of position \d+ \(\d+ entries, (\d+) bytes",
                      fresh.logs())
    return {"bootstraps_killed": 2, "killed_before_import_done": sum(killed_before),
            "checkpoint_bytes": int(size[-1]) if size else None}


def case_agent_kill(t, expiry_timeout=LEASE_S * 5 + 10):
    """kill -9 of an agent: its sources expire on every router, then the
    restarted agent rebuilds them from the engines' replay."""
    agent = t.agents["node-a"]
    before = t.expiries(t.routers)
    agent.kill()
    t.wait_expired("node-a", t.routers, before, timeout=expiry_timeout)
    agent.restart()
    return {"expired_then_restored": True}


def leader_server(t):
    name = t.stream_info()["cluster"]["leader"]
    return next(s for s in t.servers if s.args[s.args.index("-n") + 1] == name)


def case_nats_one_killed(t):
    """kill -9 of the NATS server leading the stream, restarted 3 s later."""
    s = leader_server(t)
    s.kill()
    time.sleep(3)
    s.start()
    return {"killed": s.args[s.args.index("-n") + 1]}


def case_nats_all_restarted(t):
    """kill -9 of all three NATS servers, restarted together."""
    for s in t.servers:
        s.kill()
    time.sleep(1)
    procs = [s.start(wait=False) for s in t.servers]
    for s in procs:
        e2e.wait_for(s._accepting, 30, "nats-server back")
    t.stream_info()
    return {}


def case_leader_moved(t, attempts=1):
    """The stream leader steps down (JetStream API, as an operator would).
    The election may hand the leadership back to the same server when the
    other replicas are still catching up (seen in the soak after a NATS
    server restart: its catch-up stalled for minutes under load); an
    operator then steps it down again. The matrix (healthy cluster) allows
    one attempt; the soak three, 20 s each."""
    old = t.stream_info()["cluster"]["leader"]
    for attempt in range(1, attempts + 1):
        answer = t.admin_request("$JS.API.STREAM.LEADER.STEPDOWN." + STREAM)
        assert answer.get("success"), answer
        try:
            new = e2e.wait_for(lambda: t.stream_info()["cluster"]["leader"] != old and
                               t.stream_info()["cluster"]["leader"], 20 if attempts > 1 else 30,
                               "a new leader")
            return {"leader": "%s -> %s" % (old, new), "stepdowns": attempt}
        except AssertionError:
            if attempt == attempts:
                raise
            log("leader_moved: %s leads again after step-down %d; stepping it down again" %
                (old, attempt))


def case_engine_faults(t):
    """The simulator's knobs: drops (replayed), an unrecoverable gap, engine
    restarts, a malformed payload, a slow subscriber. Nothing to inject here."""
    return {}


case_engine_faults.sim_args = ["--fault-drop", "3", "--fault-gap", "1", "--fault-restart", "2",
                               "--fault-malformed", "1", "--fault-slow", "1"]
case_engine_faults.limit = 800


def skewed(offset):
    return {"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_NO_CACHE": "1"}


def case_clock_skew(t):
    """Wall clocks 30 s apart (libfaketime): agent node-a restarted 30 s
    behind (its new incarnation is older than its previous one), router 1
    30 s ahead; the other processes on the real clock."""
    restart_router(t.routers[1], env=skewed("+30s"))
    t.agents["node-a"].restart(env=skewed("-30s"))
    return {"agent node-a": "-30 s", "router 1": "+30 s"}


def case_clock_skew_restart_behind(t):
    """Agent node-a restarted on a clock 30 s ahead, then, seconds later,
    on a clock 30 s behind (an agent rescheduled between hosts whose clocks
    are 60 s apart): its new incarnation is older than the previous one.
    Its first message (msg_seq 1) starts it all the same (AgentTable)."""
    agent = t.agents["node-a"]
    agent.restart(env=skewed("+30s"))
    time.sleep(2)
    agent.restart(env=skewed("-30s"))
    return {"agent node-a": "+30 s, then -30 s"}


def case_partition_router(t):
    """Router 2 cut from NATS (its veth down) past the agents' lease, then
    healed: it catches up; its view of silent agents changes nothing."""
    before = t.expiries(t.routers[:2])
    link_set("router_nats", "down")
    time.sleep(LEASE_S + 2)
    link_set("router_nats", "up")
    during = [a - b for a, b in zip(t.expiries(t.routers[:2]), before)]
    return {"held_s": LEASE_S + 2, "expiries applied by routers 0, 1 meanwhile": during}


def case_partition_agent(t, expiry_timeout=LEASE_S * 5 + 10):
    """Agent node-b cut from NATS (not from its engines) past its lease:
    every router expires its sources; healed, it republishes them."""
    before = t.expiries(t.routers[:2])
    link_set("agent_nats", "down")
    start = time.monotonic()
    try:
        t.wait_expired("node-b", t.routers[:2], before, timeout=expiry_timeout)
    finally:
        held = time.monotonic() - start
        link_set("agent_nats", "up")
    return {"held_s": round(held, 1)}


def case_disk_full(t):
    """Router 1's data dir (a tmpfs) filled: checkpoints fail, counted; it
    keeps serving; space returns and checkpoints resume."""
    r = t.routers[1]
    failures = r.metric("kvindex_checkpoint_failures_total")
    filler = os.path.join(t.tmpfs, "filler")
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    try:
        e2e.wait_for(lambda: r.metric("kvindex_checkpoint_failures_total") >= failures + 2, 30,
                     "checkpoint failures on a full disk")
    finally:
        os.remove(filler)
    written = r.metric("kvindex_checkpoint_writes_total")
    e2e.wait_for(lambda: r.metric("kvindex_checkpoint_writes_total") > written, 30,
                 "a checkpoint once space returned")
    return {"failures": int(r.metric("kvindex_checkpoint_failures_total") - failures)}


def case_checkpoint_dir_deleted(t):
    """Router 1's checkpoint directory removed under it: it keeps serving,
    the next checkpoint recreates the database; killed and restarted
    afterwards, it restores from a checkpoint written there."""
    r = t.routers[1]
    writes = r.metric("kvindex_checkpoint_writes_total")
    failures = r.metric("kvindex_checkpoint_failures_total")
    for name in ("checkpoints", "checkpoints.ingest"):
        shutil.rmtree(os.path.join(r.data_dir, name), ignore_errors=True)
    e2e.wait_for(lambda: r.metric("kvindex_checkpoint_writes_total") + r.metric(
        "kvindex_checkpoint_failures_total") >= writes + failures + 5, 30, "checkpoint attempts")
    ckpt = os.path.join(r.data_dir, "checkpoints")
    outcome = {"writes_after_delete": int(r.metric("kvindex_checkpoint_writes_total") - writes),
               "failures_after_delete": int(r.metric("kvindex_checkpoint_failures_total") -
                                            failures),
               "current_recreated": os.path.exists(os.path.join(ckpt, "CURRENT"))}
    # A write in flight when the directory went may fail; the rest succeed.
    assert outcome["writes_after_delete"] >= 4 and outcome["current_recreated"], outcome
    assert "was deleted under the router" in r.logs(), r.logs()[-2000:]
    before = restored(r)
    restart_router(r)
    outcome["restored_after_restart"] = restored(r) > before
    assert outcome["restored_after_restart"], r.logs()[-2000:]
    return outcome


CASES = [case_router_kill_apply, case_checkpoint_dir_deleted, case_router_kill_checkpoint,
         case_router_kill_bootstrap, case_agent_kill, case_nats_one_killed,
         case_nats_all_restarted, case_leader_moved, case_engine_faults, case_partition_router,
         case_partition_agent, case_disk_full, case_clock_skew, case_clock_skew_restart_behind]
CASE_BUDGET_S = 60


def run_matrix(t, names, budget=CASE_BUDGET_S, heap=""):
    by_name = {c.__name__[len("case_"):]: c for c in CASES}
    unknown = [n for n in names if n not in by_name]
    assert not unknown, "no case named %s" % unknown
    # In the order given, repeated as often as named.
    cases = [by_name[n] for n in names] if names else CASES
    results = []
    for case in cases:
        name = case.__name__[len("case_"):]
        start = time.monotonic()
        t.start_epoch(getattr(case, "sim_args", ()), limit=getattr(case, "limit", None))
        t.wait_fraction(0.3)
        injected = time.monotonic()
        seen = case(t) or {}
        log("%s: injected and healed" % name)
        checked = t.finish_epoch()
        # From the fault to every router on the truth's digest (the epoch's
        # traffic goes on for ~3.5 s after the fault: the floor).
        checked["recovery_s"] = round(t.exact_at - injected, 1)
        for r in t.extra_routers:
            r.cleanup()
        t.extra_routers = []
        took = time.monotonic() - start
        checked["rss_mb"] = {k: round(v[1], 1) for k, v in t.rss().items()
                             if k.startswith(("router", "agent"))}
        checked["consumers"] = t.stream_info()["state"].get("consumer_count")
        if heap:
            checked["heap_mb"] = {"router%d" % i: heap_probe(r, trim=(heap == "trim"))
                                  for i, r in enumerate(t.routers)}
        log("%-24s %5.1fs  %s  %s" % (name, took, json.dumps(seen), json.dumps(checked)))
        assert took <= budget, "%s took %.1f s (budget %d s)" % (name, took, budget)
        if name == "engine_faults":
            assert sum(checked["faults"].values()) > 0 and checked["cleared_sources"] > 0, checked
        results.append((name, took, seen, checked))
    return results


# --- the soak ---------------------------------------------------------------------------

SOAK_FAULTS = ["router_kill", "agent_kill", "nats_one_killed", "leader_moved",
               "partition_router", "partition_agent"]


def soak_fault(t, kind, rng):
    if kind == "router_kill":
        restart_router(t.routers[1])
    elif kind == "agent_kill":
        # Longer than the matrix allows: a router may still be recovering
        # from the previous fault (a NATS kill stalls consumers for tens of
        # seconds on this machine, docs/reliability.md "Findings").
        case_agent_kill(t, expiry_timeout=90)
    elif kind == "nats_one_killed":
        s = rng.choice(t.servers)
        s.kill()
        time.sleep(rng.uniform(1, 4))
        s.start()
    elif kind == "leader_moved":
        case_leader_moved(t, attempts=3)
    elif kind == "partition_router":
        case_partition_router(t)
    elif kind == "partition_agent":
        case_partition_agent(t, expiry_timeout=90)


def heap_probe(proc, trim=False):
    """Diagnostics (--heap-probe): glibc's malloc_stats() of a running
    process, called through gdb (it prints to the process's stderr, its
    log): {"rss", "heap_in_use", "heap_system"} in MiB; with `trim` also
    the RSS after malloc_trim(0) (freed heap returned to the system). RSS
    well above what the heap has in use is the allocator keeping freed
    memory, not a leak."""
    if shutil.which("gdb") is None or proc.proc is None:
        return None
    before = proc.logs()
    calls = ["-ex", "call (void)malloc_stats()"]
    if trim:
        calls += ["-ex", "call (int)malloc_trim(0)"]
    rss = e2e.rss_mb(proc.proc.pid)
    subprocess.run(["gdb", "-p", str(proc.proc.pid), "-batch", "-nx"] + calls,
                   capture_output=True, timeout=60)
    out = {"rss": round(rss, 1)}
    text = proc.logs()[len(before):]
    total = re.search(r"Total \(incl\. mmap\):\s*system bytes\s*=\s*(\d+)\s*"
                      r"in use bytes\s*=\s*(\d+)", text)
    if total:
        out["heap_system"] = round(int(total.group(1)) / 2**20, 1)
        out["heap_in_use"] = round(int(total.group(2)) / 2**20, 1)
    if trim:
        out["rss_after_trim"] = round(e2e.rss_mb(proc.proc.pid), 1)
    return out


def router_log_counts(t):
    """Per router (since its last start): resubscriptions after a stall, and
    the messages (bytes) the subscriptions left behind had queued, freed."""
    out = {}
    for i, r in enumerate(t.routers):
        try:
            text = r.logs()
        except OSError:
            continue
        freed = re.findall(r"freed (\d+) messages \((\d+) bytes\)", text)
        out["router%d" % i] = {"resubscribed": text.count("resubscribing"),
                               "new_connection": text.count("reading through a new NATS"),
                               "freed_messages": sum(int(a) for a, _ in freed),
                               "freed_mb": round(sum(int(b) for _, b in freed) / 2**20, 1)}
    return out


REST_S = 30


def rss_at_rest(t, seconds=REST_S):
    """Each process's RSS at rest: the lowest of samples every 2 s over
    `seconds` after the last epoch's checks (no fault, no request in flight).
    One sample right after the checks caught a router still holding the
    buffers of its last catch-up (124 MiB where its floor was 58 all hour,
    docs/reliability.md); the HeapTrimmer returns such heap every 10 s, so
    the window holds three of its checks. Peaks are reported apart."""
    low = t.rss()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(2)
        for name, (pid, mb) in t.rss().items():
            if name in low and low[name][0] == pid and mb < low[name][1]:
                low[name] = (pid, mb)
    return low


def run_soak(t, duration, rate, warmup, fault_every, summary_out=None, rss_bound=5.0):
    """Epochs of the whole trace (or what fits) back to back until
    `duration`; faults at seeded random moments; RSS and lag sampled."""
    rng = random.Random(t.seed)
    with open(ts.TRACE) as f:
        trace_len = sum(1 for _ in f)
    end = time.monotonic() + duration
    samples = []  # (t, {name: (pid, rss)}, lag)
    faults = []
    order = []
    epochs = []
    stop = threading.Event()
    events = 0

    def sampler():
        while not stop.wait(2.0):
            try:
                last = t.stream_info()["state"]["last_seq"]
                lags = []
                for r in t.routers:
                    try:
                        lags.append(last - r.state()["applied_seq"])
                    except (OSError, http.client.HTTPException):
                        pass
                samples.append((time.monotonic(), t.rss(), max(lags) if lags else None))
            except (AssertionError, OSError, http.client.HTTPException):
                pass
    thread = threading.Thread(target=sampler, daemon=True)
    start = time.monotonic()
    thread.start()
    try:
        while time.monotonic() < end - 20:
            left = end - time.monotonic()
            limit = max(200, min(trace_len, int((left - 15) * rate)))
            knobs = ["--fault-drop", "0.3%", "--fault-gap", "0.05%", "--fault-restart", "0.05%",
                     "--fault-malformed", "0.05%", "--fault-slow", "0.05%"]
            t.start_epoch(knobs, limit=limit, rate=rate)
            epoch_end = time.monotonic() + limit / rate
            next_fault = time.monotonic() + rng.uniform(fault_every / 2, fault_every)
            while time.monotonic() < epoch_end - 3:
                if t.sim.proc.poll() is not None:
                    break
                if time.monotonic() >= next_fault:
                    if not order:  # every kind once per round, in a seeded order
                        order = rng.sample(SOAK_FAULTS, len(SOAK_FAULTS))
                    kind = order.pop()
                    at = time.monotonic() - start
                    soak_fault(t, kind, rng)
                    faults.append((round(at, 1), kind, round(time.monotonic() - start - at, 1)))
                    log("soak fault %s at %.1fs, recovered in %.1fs" % (kind, at, faults[-1][2]))
                    next_fault = time.monotonic() + rng.uniform(fault_every / 2, fault_every)
                time.sleep(0.2)
            # A shared machine may run the simulator slower than --rate.
            checked = t.finish_epoch(timeout=limit / rate * 2 + 120)
            events = checked["events_applied"]  # router 0's counter: cumulative, never restarted
            epochs.append((limit, checked))
            log("soak epoch %d: %d requests, %s" % (len(epochs), limit, json.dumps(checked)))
    finally:
        stop.set()
        thread.join(5)
    elapsed = time.monotonic() - start
    # RSS of the processes alive from the end of warm-up to the end (same
    # pid): the warm-up's high-water mark against the RSS at rest after the
    # last epoch's checks (rss_at_rest); the peak is reported.
    after = [s for s in samples if s[0] - start >= warmup]
    assert after, "no sample after warm-up"
    final = rss_at_rest(t)
    growth = {}
    for name, (pid, first) in after[0][1].items():
        if name == "mockengine" or name.startswith("nats-"):
            continue  # reported only: the simulator restarts per epoch, NATS holds the stream
        if final.get(name, (None,))[0] != pid:
            continue  # restarted by a fault since
        peak = max(s[1][name][1] for s in after if s[1].get(name, (None,))[0] == pid)
        # The baseline is the warm-up's high-water mark: RSS follows the
        # index's size, which faults move both ways (an expiry empties
        # sources); what may not happen is a process ending above it.
        first = max([first] + [s[1][name][1] for s in samples
                               if s[0] - start < warmup and s[1].get(name, (None,))[0] == pid])
        growth[name] = (first, final[name][1], peak, 100.0 * (final[name][1] - first) / first)
    lags = [s[2] for s in samples if s[2] is not None]
    nats_rss = {name: (after[0][1][name][1], after[-1][1].get(name, (0, 0))[1])
                for name in after[0][1] if name.startswith("nats-")}
    summary = {"duration_s": round(elapsed, 1), "epochs": len(epochs),
               "requests": sum(e[0] for e in epochs),
               "events_applied": events, "faults_injected": len(faults),
               "process_faults": faults,
               "engine_faults": {k: sum(e[1]["faults"].get(k, 0) for e in epochs)
                                 for k in ("drop", "gap", "restart", "malformed", "slow")},
               "max_lag_messages": max(lags) if lags else None,
               "rss_growth_pct": {k: round(v[3], 2) for k, v in growth.items()},
               "rss_mb_warm_final_peak": {k: [round(x, 1) for x in v[:3]]
                                          for k, v in growth.items()},
               "nats_rss_mb": {k: [round(a, 1), round(b, 1)] for k, (a, b) in nats_rss.items()},
               "data_lost": 0,
               "router_log": router_log_counts(t),
               "rss_series_mb": {name: [[round(s[0] - start), round(s[1][name][1], 1)]
                                        for s in samples[::5] if name in s[1]]
                                 for name in samples[-1][1]} if samples else {}}
    log("soak summary: " + json.dumps({k: v for k, v in summary.items()
                                       if k != "rss_series_mb"}))
    if summary_out:  # before the checks: a failed run's figures are kept too
        with open(summary_out, "w") as f:
            json.dump(summary, f, indent=1)
    assert growth, "no process lived through the whole run after warm-up"
    for name, (first, last, _, pct) in growth.items():
        assert not rss_bound or pct < rss_bound, "%s RSS grew %.1f %% (%.1f -> %.1f MiB)" % (
            name, pct, first, last)
    assert lags and max(lags) < 20000, "lag unbounded: %s" % lags[-20:]
    return summary


# --- main -------------------------------------------------------------------------------

def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("mode", choices=["matrix", "soak"])
    parser.add_argument("--cases", default="")
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--rate", type=float, default=0,
                        help="requests/s (default: matrix 60, soak 40)")
    parser.add_argument("--limit", type=int, default=300, help="requests per matrix epoch")
    parser.add_argument("--case-budget", type=float, default=CASE_BUDGET_S,
                        help="matrix: most seconds a case may take (CI: 60)")
    parser.add_argument("--heap-probe", choices=["", "stats", "trim"], default="",
                        help="matrix, diagnostics: each router's malloc_stats() after each "
                        "case (gdb), and with 'trim' its RSS after malloc_trim(0)")
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument("--fault-every", type=float, default=20)
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--summary-out", default="")
    parser.add_argument("--keep-logs", default="",
                        help="diagnostics: on failure, copy every process's whole log and "
                        "the routers', agents' and truth's state to this directory")
    parser.add_argument("--rss-bound", type=float, default=5.0,
                        help="soak: largest RSS growth after warm-up, %% (0: report only)")
    args = parser.parse_args(argv[1:])
    if "KVREL_NS_MAIN" not in os.environ:
        if os.geteuid() != 0:
            print("reliability: skipped: needs root (network namespaces, tmpfs)",
                  file=sys.stderr)
            return 77  # ctest SKIP_RETURN_CODE
        return run_in_namespaces(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    rate = args.rate or (60 if args.mode == "matrix" else 40)
    t = Topology(args.bin_dir, rate=rate, limit=args.limit, seed=args.seed)
    try:
        t.start()
        if args.mode == "matrix":
            results = run_matrix(t, [c for c in args.cases.split(",") if c], args.case_budget,
                                 args.heap_probe)
            state = t.stream_info()["state"]
            summary = {"cases": [{"case": n, "seconds": round(s, 1), "saw": seen, "checked": c}
                                 for n, s, seen, c in results],
                       "stream": {k: state[k] for k in ("messages", "bytes", "first_seq",
                                                        "last_seq")},
                       "router0_events_applied": int(t.routers[0].metric(
                           "kvindex_router_events_applied_total")),
                       "router_log": router_log_counts(t)}
            log("stream %s, router 0 applied %d events, routers' logs %s" % (
                json.dumps(summary["stream"]), summary["router0_events_applied"],
                json.dumps(summary["router_log"])))
        else:
            summary = run_soak(t, args.duration, rate, args.warmup, args.fault_every,
                               args.summary_out, args.rss_bound)
        if args.summary_out:
            with open(args.summary_out, "w") as f:
                json.dump(summary, f, indent=1)
        log("%s passed" % args.mode)
        return 0
    except BaseException:
        t.dump_logs()
        if args.keep_logs:
            t.keep_logs(args.keep_logs)
        raise
    finally:
        t.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
