#!/usr/bin/env python3
"""RocksDB checkpoints, end to end (issue: back in seconds after a restart,
exact after kill -9, resync when the log has moved on).

Real processes only: nats-server, kvindex-agent --nats, kvindex-router --nats
replicas with checkpoints in their --data-dir, and the embedded router fed
the same engines as the reference truth. Every process is stopped by its pid,
also when a check fails; every loop is bounded.

Usage: test_checkpoint.py BIN_DIR SCENARIO
Scenarios: restart, kill9, damaged, disk_full, retention, bootstrap, bootstrap_hostile,
  stream_identity
"""

import glob
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import nats_e2e as ne  # noqa: E402
import test_distributed as td  # noqa: E402
from nats_e2e import e2e  # noqa: E402

FAST = ["--checkpoint-interval", "200ms"]


def restored_positions(router):
    return [int(m) for m in re.findall(r"restored checkpoint \d+ from \S+: position (\d+)",
                                       router.logs())]


def assert_exact_resume(router):
    """A restart from a checkpoint replays the tail and needs no healing: no
    lost positions, no sender gaps that would make it ask for snapshots."""
    logs = router.logs()
    for line in ("are gone; resyncing", "asked agent"):
        assert line not in logs, "%r after a restart:\n%s" % (line, logs[-3000:])


def checkpoint_files(data_dir):
    return sorted(glob.glob(os.path.join(data_dir, "checkpoints", "*.sst")))


def wait_written(router, at_least, timeout=30):
    return e2e.wait_for(lambda: router.metric("kvindex_checkpoint_writes_total") >= at_least,
                        timeout, "%d checkpoints written" % at_least)


class Driver:
    """Feeds both engines from a background thread until stopped."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop.is_set():
            for load in self.cluster.loads:
                load.run(20, pause_every=5, pause=0.002)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def scenario_restart(bin_dir):
    """A clean restart resumes from the shutdown checkpoint (NATS and
    embedded) and replays only the tail."""
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
    try:
        c.start()
        c.drive(300)
        c.settle()
        r = c.routers[1]
        at_stop = r.state()["applied_seq"]
        assert r.stop() == 0
        c.drive(200)  # the tail the restarted router replays
        r.start().wait_ready(60)
        # Heartbeats move the position until the very end: at least where it was.
        positions = restored_positions(r)
        assert len(positions) == 1 and positions[0] >= at_stop, (positions, at_stop)
        digest, states = c.settle()
        assert_exact_resume(r)
        c.check_matches()
        # The embedded reference restarts from its checkpoint too.
        ref_state = c.reference.json("GET", "/v1/state")
        assert c.reference.stop() == 0
        c.reference.start().wait_ready(30)
        restore = c.reference.request("GET", "/metrics")[2]
        assert re.search(r"^kvindex_checkpoint_restore_seconds [0-9.e-]+$", restore, re.M), restore
        seq = float(re.search(r"^kvindex_checkpoint_applied_seq (\S+)$", restore, re.M).group(1))
        assert seq >= ref_state["applied_seq"], (seq, ref_state)
        digest, states = c.settle()
        print("restart: resumed at %d, digest %s at %d" % (at_stop, digest,
                                                          states[0]["applied_seq"]))
    finally:
        c.cleanup()


def scenario_kill9(bin_dir, iterations=20):
    """kill -9 at random moments while events flow (during apply and during
    checkpoint writes): every restart reaches the uninterrupted replica's
    digest."""
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
    rng = random.Random(20261201)
    try:
        c.start()
        victim = c.routers[1]
        deadline = time.monotonic() + 240
        restored = 0
        with Driver(c):
            for i in range(iterations):
                assert time.monotonic() < deadline, "kill loop took too long (iteration %d)" % i
                time.sleep(rng.uniform(0.05, 0.6))
                victim.kill9()
                victim.start().wait_ready(60)
                restored = len(restored_positions(victim))
        digest, states = c.settle(timeout=90)
        c.check_matches()
        assert_exact_resume(victim)
        assert restored >= iterations // 2, "only %d restarts restored a checkpoint" % restored
        print("kill9: %d kills, %d restores from a checkpoint, digest %s at %d" % (
            iterations, restored, digest, states[0]["applied_seq"]))
    finally:
        c.cleanup()


def garble(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        for at in range(size // 8, size // 2, 512):
            f.seek(at)
            f.write(b"garbage!")


def scenario_damaged(bin_dir):
    """A garbled or truncated newest checkpoint: one log line, the previous
    one is used; every checkpoint damaged: the router starts from the log."""
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
    try:
        c.start()
        r = c.routers[1]
        for damage in ("garble", "truncate", "all"):
            c.drive(150)
            c.settle()
            written = r.metric("kvindex_checkpoint_writes_total")
            c.drive(100)
            wait_written(r, written + 2)
            r.kill9()
            files = checkpoint_files(r.data_dir)
            assert len(files) >= 2, files
            if damage == "garble":
                garble(files[-1])
            elif damage == "truncate":
                os.truncate(files[-1], os.path.getsize(files[-1]) // 3)
            else:
                for f in files:
                    garble(f)
            r.start().wait_ready(60)
            logs = r.logs()
            if damage == "all":
                assert "verifies: starting from the log" in logs, logs[-3000:]
            else:
                assert "is unusable, trying an older one" in logs, logs[-3000:]
            c.settle()
        c.check_matches()
        print("damaged: garbled, truncated and all-damaged checkpoints recovered")
    finally:
        c.cleanup()


def scenario_disk_full(bin_dir):
    """Checkpoints on a small tmpfs: disk full, then read-only: the router
    keeps serving, counts the failures, and resumes when space returns."""
    mount = tempfile.mkdtemp(prefix="kvindex-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount], check=True)
    c = None
    try:
        c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
        r = c.routers[1]
        r.cleanup()
        c.routers[1] = r = ne.NatsRouter(bin_dir, c.url, FAST, data_dir=os.path.join(mount, "d"))
        c.start()
        c.drive(100)
        c.settle()
        wait_written(r, 1)
        # Fill the filesystem: the next checkpoints cannot be written.
        with open(os.path.join(mount, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        c.drive(200)
        try:
            e2e.wait_for(lambda: r.metric("kvindex_checkpoint_failures_total") >= 2, 30,
                         "checkpoint failures counted")
        except AssertionError:
            print(r.logs()[-5000:])
            raise
        c.settle()  # still serving, exactly
        assert "checkpoint to" in r.logs() and "failed" in r.logs()
        os.remove(os.path.join(mount, "filler"))
        written = r.metric("kvindex_checkpoint_writes_total")
        c.drive(50)
        wait_written(r, written + 1)
        # Read-only (a tmpfs cannot turn read-only under open files: the router
        # starts on it): it serves from the log, counts the failures, and
        # checkpoints once the directory is writable again.
        assert r.stop() == 0
        subprocess.run(["mount", "-o", "remount,ro", mount], check=True)
        r.start().wait_ready(60)
        e2e.wait_for(lambda: r.metric("kvindex_checkpoint_failures_total") >= 2, 30,
                     "read-only failures counted")
        c.drive(100)
        c.settle()
        subprocess.run(["mount", "-o", "remount,rw", mount], check=True)
        c.drive(50)
        wait_written(r, 1)
        # And the last good checkpoint restores.
        at_stop = r.state()["applied_seq"]
        assert r.stop() == 0
        r.start().wait_ready(60)
        assert restored_positions(r)[-1] >= at_stop, (restored_positions(r), at_stop)
        c.settle()
        print("disk_full: failures %d, checkpoints resumed after space and write access "
              "returned" % r.metric("kvindex_checkpoint_failures_total"))
    finally:
        if c is not None:
            c.cleanup()
        subprocess.run(["umount", "-l", mount], check=False)
        os.rmdir(mount)


def scenario_retention(bin_dir):
    """The stream dropped what a stopped router had not applied (max age 3 s):
    it resumes from its checkpoint, sees the gap, clears and asks the agent
    for snapshots, and reaches every other replica's digest; so does a brand
    new replica that starts after retention."""
    stream = ["--stream-max-age", "3s", "--stream-duplicate-window", "1s"]
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], agent_extra=stream,
                   router_extra=FAST + stream)
    try:
        c.start()
        c.drive(200)
        c.settle()
        r = c.routers[1]
        assert r.stop() == 0
        c.drive(200)
        time.sleep(4)  # everything r has not applied ages out
        c.drive(100)
        r.start().wait_ready(60)
        digest, states = c.settle(timeout=90)
        c.check_matches()
        text = r.request("GET", "/metrics")[2]
        assert 'kvindex_router_log_messages_total{outcome="position_gap"} 1' in text, text
        assert "are gone; resyncing" in r.logs()
        fresh = ne.NatsRouter(bin_dir, c.url, FAST + stream)
        c.extra.append(fresh)
        fresh.start().wait_ready(60)
        digest, states = c.settle(c.routers + [fresh], timeout=90)
        print("retention: gap resynced, digest %s at %d on %d replicas" % (
            digest, states[0]["applied_seq"], len(states)))
    finally:
        c.cleanup()


def start_with_checkpoint(c):
    """Starts the cluster, drives 300 batches, settles; returns its first
    router once it wrote a checkpoint (a bootstrap peer)."""
    c.start()
    c.drive(300)
    c.settle()
    wait_written(c.routers[0], 1)
    return c.routers[0]


def scenario_bootstrap(bin_dir):
    """A new replica with an empty data dir starts from a peer's newest
    checkpoint (--bootstrap-from) and reads the stream only from its
    position on; a peer that does not answer leaves it to the log."""
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
    try:
        peer = start_with_checkpoint(c)
        fresh = ne.NatsRouter(bin_dir, c.url, FAST + [
            "--bootstrap-from", "http://127.0.0.1:%d" % peer.port])
        c.extra.append(fresh)
        fresh.start().wait_ready(60)
        logs = fresh.logs()
        m = re.search(r"bootstrapped from \S+: checkpoint of position (\d+)", logs)
        assert m and int(m.group(1)) > 0, logs[-3000:]
        assert restored_positions(fresh) == [int(m.group(1))], logs[-3000:]
        c.drive(100)
        c.settle(c.routers + [fresh])
        assert_exact_resume(fresh)
        # Restarted, it uses its own checkpoint, not the peer's.
        assert fresh.stop() == 0
        fresh.start().wait_ready(60)
        assert len(re.findall("bootstrapped from", fresh.logs())) == 1
        lone = ne.NatsRouter(bin_dir, c.url, FAST + ["--bootstrap-from", "http://127.0.0.1:1"])
        c.extra.append(lone)
        lone.start().wait_ready(60)
        assert "no bootstrap from" in lone.logs(), lone.logs()[-3000:]
        digest, states = c.settle(c.routers + [fresh, lone])
        print("bootstrap: from position %s; digest %s on %d replicas" % (
            m.group(1), digest, len(states)))
    finally:
        c.cleanup()


class HostilePeer:
    """A loopback "peer router" for --bootstrap-from that answers every
    request with `head` and then `body_byte` forever (every `every` s),
    recording the request headers it saw. Stopped by stop()."""

    def __init__(self, head, body_byte=b"\0" * 65536, every=0.0, tls=None, once=False):
        import socket
        self.head, self.body_byte, self.every = head, body_byte, every
        self.tls, self.once = tls, once
        self.handshake_errors = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests = []
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(5)
            try:
                if self.tls is not None:
                    try:
                        conn = self.tls.wrap_socket(conn, server_side=True)
                    except OSError as error:
                        self.handshake_errors.append(str(error))
                        continue
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data.decode(errors="replace"))
                conn.sendall(self.head)
                while not self.done and not self.once:
                    conn.sendall(self.body_byte)
                    if self.every:
                        time.sleep(self.every)
            except OSError:
                pass
            finally:
                conn.close()

    def stop(self):
        self.done = True
        self.thread.join(10)
        self.sock.close()


def make_ca_and_cert(workdir, name):
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl CLI)."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, timeout=30)
    ca_key, ca = os.path.join(workdir, name + "-ca.key"), os.path.join(workdir, name + "-ca.pem")
    key, csr = os.path.join(workdir, name + ".key"), os.path.join(workdir, name + ".csr")
    cert, ext = os.path.join(workdir, name + ".pem"), os.path.join(workdir, name + ".ext")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
        "-days", "2", "-subj", "/CN=kvindex test CA " + name)
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj",
        "/CN=127.0.0.1")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
        "-days", "2", "-extfile", ext)
    return ca, cert, key


def scenario_bootstrap_hostile(bin_dir):
    """Issue #21's reproductions: a --bootstrap-from peer streaming zeros
    without Content-Length drove the router to 1.97 GB and blocked its start
    for minutes, ignoring SIGTERM; the router sent its API token over plain
    HTTP. Now: refused at once (no Content-Length, or one past
    --bootstrap-max-bytes), started from the log, the token never sent, and
    a slow bootstrap ends at SIGTERM."""
    server = ne.NatsServer().start()
    token_dir = tempfile.mkdtemp(prefix="kvindex-token-")
    token_file = os.path.join(token_dir, "token")
    with open(token_file, "w") as f:
        f.write("bootstrap-secret\n")
    peers, routers = [], []
    try:
        zeros = HostilePeer(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
        peers.append(zeros)
        r = ne.NatsRouter(bin_dir, server.url, FAST + [
            "--auth-token-file", token_file,
            "--bootstrap-from", "http://127.0.0.1:%d" % zeros.port])
        routers.append(r)
        start = time.monotonic()
        r.start().wait_ready(20)
        took = time.monotonic() - start
        rss = e2e.rss_mb(r.proc.pid)
        logs = r.logs()
        assert "no Content-Length" in logs and "starting from the log" in logs, logs[-3000:]
        assert "not sending the API token over plain HTTP" in logs, logs[-3000:]
        assert zeros.requests and all("bootstrap-secret" not in q for q in zeros.requests), \
            zeros.requests
        assert rss < 300, "RSS %.0f MB after a peer streamed zeros" % rss
        assert r.stop() == 0

        huge = HostilePeer(b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
        peers.append(huge)
        r2 = ne.NatsRouter(bin_dir, server.url, FAST + [
            "--bootstrap-max-bytes", "1000000",
            "--bootstrap-from", "http://127.0.0.1:%d" % huge.port])
        routers.append(r2)
        r2.start().wait_ready(20)
        assert "exceeds the limit of 1000000 bytes" in r2.logs(), r2.logs()[-3000:]
        assert r2.stop() == 0

        slow = HostilePeer(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n",
                           body_byte=b"\0", every=0.05)
        peers.append(slow)
        r3 = ne.NatsRouter(bin_dir, server.url, FAST + [
            "--bootstrap-from", "http://127.0.0.1:%d" % slow.port])
        routers.append(r3)
        r3.start()
        e2e.wait_for(lambda: slow.requests, 10, "the bootstrap request")
        time.sleep(0.5)
        stop_start = time.monotonic()
        code = r3.stop(timeout=10)
        stopped_in = time.monotonic() - stop_start
        assert code == 0, (code, r3.logs()[-3000:])
        assert stopped_in < 3, "SIGTERM took %.1f s during a bootstrap" % stopped_in
        # https with --bootstrap-ca: the certificate is verified and only
        # then does the token travel; a peer whose certificate another CA
        # signed gets no request at all.
        import ssl
        ca, cert, key = make_ca_and_cert(token_dir, "peer")
        other_ca, _, _ = make_ca_and_cert(token_dir, "other")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        tls = HostilePeer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno",
                          tls=context, once=True)
        peers.append(tls)
        for ca_file, trusted in ((ca, True), (other_ca, False)):
            seen = len(tls.requests)
            r4 = ne.NatsRouter(bin_dir, server.url, FAST + [
                "--auth-token-file", token_file, "--bootstrap-ca", ca_file,
                "--bootstrap-from", "https://127.0.0.1:%d" % tls.port])
            routers.append(r4)
            r4.start().wait_ready(20)
            logs = r4.logs()
            if trusted:
                assert len(tls.requests) == seen + 1, (tls.requests, logs[-3000:])
                assert "Bearer bootstrap-secret" in tls.requests[-1], tls.requests[-1]
                assert "answered 404" in logs, logs[-3000:]
            else:
                assert len(tls.requests) == seen, tls.requests
                assert "not accepted" in logs, logs[-3000:]
            assert "not sending the API token" not in logs, logs[-3000:]
            assert r4.stop() == 0
        print("bootstrap_hostile: ready in %.1f s at %.0f MB against a zero stream; a 1 GiB "
              "Content-Length refused; SIGTERM during a slow bootstrap: stopped in %.2f s; "
              "https: token sent only after the CA verified the peer" % (took, rss, stopped_in))
    finally:
        for r in routers:
            try:
                r.stop()
            except AssertionError:
                pass
            r.cleanup()
        for p in peers:
            p.stop()
        server.stop()
        server.cleanup()
        shutil.rmtree(token_dir, ignore_errors=True)


def scenario_stream_identity(bin_dir):
    """Issue #21's reproductions: a checkpoint from another cluster (position
    2,421 on a stream ending at 50) was imported and reported ready; a router
    restarted from its checkpoint on a wiped and recreated stream skipped the
    new stream's first positions for good, and said ready while the stream
    did not exist. Checkpoints now carry the stream's name and creation
    time: one of another stream, or past its end, is refused (logged,
    kvindex_checkpoint_refused_total) and the router rebuilds from the log;
    /readyz fails while the stream is missing or was recreated under it."""
    other = ne.NatsServer(name="other").start()
    c = td.Cluster(bin_dir, [ne.NatsServer().start()], router_extra=FAST)
    lone = None
    try:
        peer = start_with_checkpoint(c)
        # Another cluster's router (an empty stream) bootstrapping from this
        # one: the checkpoint is imported, then refused at restore.
        lone = ne.NatsRouter(bin_dir, other.url, FAST + [
            "--bootstrap-from", "http://127.0.0.1:%d" % peer.port])
        lone.start().wait_ready(60)
        logs = lone.logs()
        assert "bootstrapped from" in logs, logs[-3000:]
        assert "refused" in logs, logs[-3000:]
        assert restored_positions(lone) == [], logs[-3000:]
        assert lone.metric("kvindex_checkpoint_refused_total") >= 1
        state = lone.state()
        assert state["applied_seq"] == 0 and state["sources"] == 0, state
        code = lone.stop()
        assert code == 0, (code, lone.logs()[-3000:])

        # The stream wiped and recreated under the cluster: the router that
        # keeps running is no longer ready; one restarted from its
        # checkpoint refuses it and reads the new stream from position 1.
        victim = c.routers[1]
        wait_written(victim, 1)
        before = victim.state()["applied_seq"]  # its last checkpoint's position at the stop
        assert before > 0
        assert victim.stop() == 0
        server = c.servers[0]
        server.stop()
        shutil.rmtree(os.path.join(server.dir, "js"), ignore_errors=True)
        server.start()
        e2e.wait_for(lambda: peer.request("GET", "/readyz")[0] == 503, 30,
                     "the running router not ready on a recreated (or missing) stream")
        reason = peer.request("GET", "/readyz")[2]
        assert "stream" in str(reason), reason
        c.drive(30)
        victim.start().wait_ready(60)
        vlogs = victim.logs()
        assert "refused" in vlogs, vlogs[-3000:]
        assert victim.metric("kvindex_checkpoint_refused_total") >= 1
        assert len(restored_positions(victim)) == len(re.findall("restored checkpoint", vlogs))
        # It reads the new stream from position 1 (the old code resumed at
        # `before` + 1 and never applied the new stream's first positions).
        # Ready can come before the agent's first batch on the new stream
        # (a loaded machine): wait for it to apply something.
        e2e.wait_for(lambda: victim.state()["applied_seq"] > 0, 30,
                     "the restarted router applying the new stream")
        state = victim.state()
        assert 0 < state["applied_seq"] < before, (state, before)
        print("stream_identity: another cluster's checkpoint refused; on a recreated stream the "
              "running router went unready (%s) and the restarted one rebuilt from position 1 "
              "(now at %d; its checkpoint was at %d)" % (
                  reason.strip() if isinstance(reason, str) else reason, state["applied_seq"],
                  before))
    finally:
        if lone is not None:
            lone.cleanup()
        c.cleanup()
        other.cleanup()


if __name__ == "__main__":
    ne.run_scenario(globals(), sys.argv)
