"""Processes and HTTP for the scripts that run a simulated cluster (the quick
start, demo_cluster.py, and the routing report, routing_report.py): each
process logs to a file and is stopped by its pid; JSON over loopback HTTP."""

import http.client
import json
import os
import signal
import subprocess
import time


class Api:
    """JSON over HTTP to one local port."""

    def __init__(self, port):
        self.port = port

    def fetch(self, method, path, body=None, timeout=5):
        """(status, body text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def call(self, method, path, body=None, timeout=5):
        status, text = self.fetch(method, path, body, timeout)
        if status != 200:
            raise OSError("%s %s: %d %s" % (method, path, status, text))
        return json.loads(text)

    def ready(self, path):
        try:
            return self.fetch("GET", path, timeout=1)[0] == 200
        except (OSError, http.client.HTTPException):
            return False


class Processes:
    """Binaries from `bin_dir`, each logging to `log_dir/<name>.log`."""

    def __init__(self, bin_dir, log_dir, who):
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.who = who  # names the script in errors
        self.procs = []

    def tool(self, name):
        return os.path.join(self.bin_dir, name)

    def spawn(self, name, args):
        log = open(os.path.join(self.log_dir, name + ".log"), "w")
        proc = subprocess.Popen([self.tool(name)] + args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((proc, log))
        return proc

    def wait_until(self, what, predicate, timeout, proc=None):
        """Polls predicate(); gives up early when `proc` exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit("%s: %s did not happen within %ds (logs in %s)" %
                         (self.who, what, timeout, self.log_dir))

    def stop_all(self, timeout=30):
        """SIGTERM, newest first; SIGKILL after `timeout`."""
        for proc, log in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
        self.procs = []
