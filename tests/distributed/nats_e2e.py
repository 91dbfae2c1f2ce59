"""Helpers for the distributed end-to-end tests: real nats-server processes
(one, or a 3-node JetStream cluster) on free loopback ports, kvindex-agent
and kvindex-router --nats processes, each stopped by its pid.

Builds on tests/e2e/kvindex_e2e.py (engines, hashing, the embedded router).
"""

import http.server
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import kvindex_e2e as e2e  # noqa: E402

NATS_SERVER = os.environ.get("NATS_SERVER_BIN", "/usr/sbin/nats-server")


class NatsServer:
    """One nats-server with JetStream and file storage."""

    def __init__(self, name="n0", cluster_port=None, routes=(), config=None, port=None,
                 reloadable=False):
        """reloadable: the server name and JetStream go into the config file
        instead of flags (nats-server 2.9 loses JetStream on a reload when
        flags enabled it, and refuses a reload naming another server), so
        reload() can rewrite the rest."""
        self.port = port or e2e.free_port()
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="kvindex-nats-")
        self.header = ""
        self.args = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port)]
        if reloadable:
            self.header = 'server_name: %s\njetstream { store_dir: "%s" }\n' % (
                name, os.path.join(self.dir, "js"))
            config = config or ""
        else:
            self.args += ["-js", "-sd", os.path.join(self.dir, "js"), "-n", name]
        if cluster_port:
            self.args += ["--cluster_name", "kvindex", "--cluster",
                          "nats://127.0.0.1:%d" % cluster_port]
            if routes:
                self.args += ["--routes", ",".join("nats://127.0.0.1:%d" % p for p in routes)]
        if config is not None:
            path = os.path.join(self.dir, "server.conf")
            with open(path, "w") as f:
                f.write(self.header + config)
            self.args += ["-c", path]
        self.proc = None
        self.log = open(os.path.join(self.dir, "server.log"), "w")

    @property
    def url(self):
        return "nats://127.0.0.1:%d" % self.port

    def start(self, wait=True):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            e2e.wait_for(self._accepting, 20, "nats-server on port %d" % self.port)
            # Someone else's server on our port answers too; ours would then
            # exit on its failed bind.
            time.sleep(0.2)
            if self.proc.poll() is not None:
                raise AssertionError("nats-server exited with %s (port %d taken?)" %
                                     (self.proc.returncode, self.port))
        return self

    def _accepting(self):
        if self.proc.poll() is not None:
            raise AssertionError("nats-server exited with %s" % self.proc.returncode)
        import socket
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def reload(self, config):
        """Rewrites server.conf and makes the running server reload it
        (SIGHUP, as `nats-server --signal reload=PID`); waits for its log line."""
        done = "Reloaded server configuration"
        log_path = os.path.join(self.dir, "server.log")

        def reloads():
            self.log.flush()
            with open(log_path) as f:
                return f.read().count(done)
        before = reloads()
        assert self.header, "reload needs NatsServer(reloadable=True)"
        with open(os.path.join(self.dir, "server.conf"), "w") as f:
            f.write(self.header + config)
        os.kill(self.proc.pid, signal.SIGHUP)
        e2e.wait_for(lambda: reloads() > before, 10, "nats-server reloaded its config")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def cleanup(self):
        self.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Process:
    """A kvindex binary run with stdout/stderr to files, stopped by pid."""

    def __init__(self, args, env=None):
        self.args = args
        self.dir = tempfile.mkdtemp(prefix="kvindex-proc-")
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        self.out = open(os.path.join(self.dir, "stdout"), "w")
        self.err = open(os.path.join(self.dir, "stderr"), "w")
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=self.out, stderr=self.err)
        return self

    def logs(self):
        with open(os.path.join(self.dir, "stderr")) as f:
            return f.read()

    def send_signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("%s did not stop within %ds" % (self.args[0], timeout))
        self.out.close()
        self.err.close()
        self.proc = None
        return code

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None:
            self.out.close()
            self.err.close()
        self.proc = None

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class Agent(Process):
    def __init__(self, bin_dir, nats_url, node, sources, extra=(), env=None):
        args = [os.path.join(bin_dir, "kvindex-agent"), "--nats", nats_url, "--node", node,
                "--replay-timeout", "2s", "--log-level", "info"]
        for source in sources:
            args += ["--source", source]
        super().__init__(args + list(extra), env)


class NatsRouter(e2e.Router):
    """kvindex-router --nats, reusing the embedded Router's HTTP helpers."""

    def __init__(self, bin_dir, nats_url, extra=(), env=None, data_dir=None):
        super().__init__(bin_dir, [], env=env, data_dir=data_dir)
        self.args = [self.bin, "--nats", nats_url, "--data-dir", self.data_dir,
                     "--http", "127.0.0.1:%d" % self.port, "--http-threads", "8",
                     "--log-level", "info"] + list(extra)
        self.logdir = tempfile.mkdtemp(prefix="kvindex-router-")

    def start(self):
        self.err = open(os.path.join(self.logdir, "stderr"), "a")  # across restarts
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=self.err, text=True)
        return self

    def logs(self):
        with open(os.path.join(self.logdir, "stderr")) as f:
            return f.read()

    def close_output(self):
        self.err.close()

    def kill9(self):
        """kill -9, then wait for it (the checkpoint tests restart it with start())."""
        self.proc.kill()
        self.proc.wait()
        self.close_output()
        self.proc = None

    def metric(self, name):
        """Sum of a metric's samples (every label set) from /metrics."""
        text = self.request("GET", "/metrics")[2]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{") or line.startswith(name + " "))

    def cleanup(self):
        super().cleanup()
        shutil.rmtree(self.logdir, ignore_errors=True)

    def state(self):
        return self.json("GET", "/v1/state")


def wait_state(routers, predicate, timeout, what):
    """Polls every router's /v1/state until predicate(states) holds."""
    def check():
        states = [r.state() for r in routers]
        return states if predicate(states) else None
    return e2e.wait_for(check, timeout, what)


def same_digest(routers, digest=None, timeout=30):
    def ok(states):
        digests = {s["digest"] for s in states}
        seqs = {s["applied_seq"] for s in states}
        return len(digests) == 1 and len(seqs) == 1 and (digest is None or digests == {digest})
    return wait_state(routers, ok, timeout, "equal digests%s" % (" == " + digest if digest else ""))


class MetricsServer:
    """An engine's OpenAI port answering GET /metrics in vLLM's names."""

    def __init__(self):
        self.waiting, self.kv, self.fail = 0, 0.1, False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if outer.fail or self.path != "/metrics":
                    self.send_response(500)
                    self.end_headers()
                    return
                body = ("# TYPE vllm:num_requests_waiting gauge\n"
                        "vllm:num_requests_waiting{model_name=\"m\"} %d\n"
                        "vllm:num_requests_running{model_name=\"m\"} 1\n"
                        "vllm:kv_cache_usage_perc{model_name=\"m\"} %f\n"
                        % (outer.waiting, outer.kv)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = "127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run_scenario(scenarios, argv):
    """Runs the scenario named by argv[2] (argv[1]: the build's bin dir).

    `scenarios` is a test module's globals(): every scenario_<name> function
    in it is a scenario.
    """
    table = {name[len("scenario_"):]: fn for name, fn in scenarios.items()
             if name.startswith("scenario_")}
    bin_dir, name = argv[1], argv[2]
    start = time.monotonic()
    table[name](bin_dir)
    print("%s passed in %.1fs" % (name, time.monotonic() - start))
