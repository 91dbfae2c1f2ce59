"""Shared helpers for kvindex end-to-end tests.

Real processes and real sockets only: `Engine` is a ZMQ publisher speaking
the vLLM wire format (PUB for live batches, ROUTER for replay), `Router`
runs build/bin/kvindex-router --embedded on free loopback ports, and the
hashing helpers recompute canonical hashes and the state digest from
semantics.md sections 2 and 6, independently of the C++ code.

Everything waits by polling with a deadline; nothing sleeps a fixed time
and hopes.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import msgpack
import xxhash
import zmq

MASK64 = (1 << 64) - 1
TIERS = {"device": 0, "host": 1, "disk": 2, "external": 3}


# --- hashing (semantics.md section 2 and 6) ---------------------------------

def xxh3(data, seed):
    return xxhash.xxh3_64_intdigest(data, seed=seed)


def local_seed(lora_name=None, cache_salt=None):
    seed = 1337
    if lora_name:
        seed = (seed + xxh3(lora_name.encode(), 0)) & MASK64
    if cache_salt:
        seed = (seed + xxh3(cache_salt.encode(), 1)) & MASK64
    return seed


def local_hashes(tokens, block_size, lora_name=None, cache_salt=None):
    seed = local_seed(lora_name, cache_salt)
    blocks = len(tokens) // block_size
    return [xxh3(struct.pack("<%dI" % block_size, *tokens[i * block_size:(i + 1) * block_size]), seed)
            for i in range(blocks)]


def seq_hashes(local):
    out = []
    for value in local:
        out.append(value if not out else xxh3(struct.pack("<QQ", out[-1], value), 1337))
    return out


def canonical(tokens, block_size, lora_name=None, cache_salt=None):
    return seq_hashes(local_hashes(tokens, block_size, lora_name, cache_salt))


def digest(entries):
    """entries: iterable of (model, worker, dp_rank, tier_name, canonical)."""
    total = 0
    for model, worker, dp_rank, tier, block in entries:
        key = (model.encode() + b"\0" + worker.encode() + b"\0" + struct.pack("<I", dp_rank) +
               bytes([TIERS[tier]]) + struct.pack("<Q", block))
        total = (total + xxh3(key, 0)) & MASK64
    return "%016x" % total


def check_hash_vectors():
    assert local_hashes([1, 2, 3, 4], 4) == [14643705804678351452]
    assert local_hashes([5, 6, 7, 8], 4) == [16777012769546811212]
    assert canonical(list(range(1, 9)), 4)[1] == 4945711292740353085
    assert local_seed("my-lora") == 12827409268353072861
    assert local_hashes([1, 2, 3, 4], 4, "my-lora") == [15671544057904749233]


# --- ports, processes ---------------------------------------------------------

def rss_mb(pid):
    """Resident memory of process `pid`, in MiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout, what, on_retry=None, retry_every=0.5):
    """Polls predicate() until truthy; calls on_retry() every retry_every s."""
    deadline = time.monotonic() + timeout
    next_retry = time.monotonic() + retry_every
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (OSError, http.client.HTTPException) as error:
            last = error
        else:
            if last:
                return last
        if on_retry is not None and time.monotonic() >= next_retry:
            on_retry()
            next_retry = time.monotonic() + retry_every
        time.sleep(0.02)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what, last))


# --- engine -------------------------------------------------------------------

class Engine:
    """A vLLM-style KV-event publisher: PUB + replay ROUTER, seq from 0."""

    def __init__(self, ctx, dp_rank=0, topic=b"", array_form=False):
        self.dp_rank = dp_rank
        self.topic = topic
        self.array_form = array_form
        self.seq = 0
        self.buffer = []  # (seq, payload), the last 10000 batches
        self.lock = threading.Lock()
        # Bound where the port is picked (free_port's port may be taken by
        # another test's process before a later bind: seen under ctest -j2).
        self.pub = ctx.socket(zmq.PUB)
        self.pub_port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.replay = ctx.socket(zmq.ROUTER)
        self.replay_port = self.replay.bind_to_random_port("tcp://127.0.0.1")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve_replay, daemon=True)
        self.thread.start()

    def source(self, worker, model, block_size, engine="vllm"):
        return ("worker=%s,engine=%s,model=%s,block_size=%d,pub=tcp://127.0.0.1:%d,"
                "replay=tcp://127.0.0.1:%d,dp_rank=%d" % (worker, engine, model, block_size,
                                                          self.pub_port, self.replay_port,
                                                          self.dp_rank))

    def _serve_replay(self):
        poller = zmq.Poller()
        poller.register(self.replay, zmq.POLLIN)
        while not self.stop.is_set():
            if not dict(poller.poll(50)):
                continue
            frames = self.replay.recv_multipart()
            identity, start = frames[0], struct.unpack(">Q", frames[-1])[0]
            with self.lock:
                batches = [b for b in self.buffer if b[0] >= start]
            for seq, payload in batches:
                self.replay.send_multipart([identity, b"", self.topic, struct.pack(">Q", seq), payload])
            self.replay.send_multipart([identity, b"", b"", b"\xff" * 8, b""])

    # Event builders (map form, or legacy array form when array_form).
    def stored(self, hashes, tokens, block_size, parent=None, medium="GPU", lora_name=None):
        if self.array_form:
            return ["BlockStored", hashes, parent, tokens, block_size, None, medium, lora_name,
                    None, None, None, None]
        event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                 "token_ids": tokens, "block_size": block_size, "lora_id": None, "medium": medium}
        if lora_name is not None:
            event["lora_name"] = lora_name
        return event

    def removed(self, hashes, medium="GPU"):
        if self.array_form:
            return ["BlockRemoved", hashes, medium, None]
        return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}

    def cleared(self):
        return ["AllBlocksCleared"] if self.array_form else {"type": "AllBlocksCleared"}

    def publish(self, events):
        """Publishes one batch; returns its seq."""
        payload = msgpack.packb([time.time(), events, self.dp_rank], use_bin_type=True)
        with self.lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
            del self.buffer[:-10000]
        self.pub.send_multipart([self.topic, struct.pack(">Q", seq), payload])
        return seq

    def nudge(self):
        """An empty batch: if a live batch was lost (slow joiner), its seq gap
        makes the agent replay it. Returns its seq."""
        return self.publish([])

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.pub.close(0)
        self.replay.close(0)


# --- router process -------------------------------------------------------------

class Router:
    def __init__(self, bin_dir, sources, extra_args=(), data_dir=None, env=None):
        self.bin = os.path.join(bin_dir, "kvindex-router")
        self.port = free_port()
        self.owns_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="kvindex-e2e-")
        self.args = [self.bin, "--embedded", "--data-dir", self.data_dir,
                     "--http", "127.0.0.1:%d" % self.port, "--node", "e2e-node",
                     "--http-threads", "8", "--replay-timeout", "2s", "--log-level", "warn"]
        for source in sources:
            self.args += ["--source", source]
        self.args += list(extra_args)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.token = None

    def start(self):
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        return self

    def logs(self):
        """What the exited process wrote to stderr."""
        return self.proc.stderr.read()

    def wait_ready(self, timeout=30):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("router exited with %s: %s" % (self.proc.returncode,
                                                                      self.logs()))
            return self.request("GET", "/readyz")[0] == 200
        wait_for(ready, timeout, "GET /readyz == 200")
        return self

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("router did not stop within %ds of signal %d" % (timeout, sig))
        self.close_output()
        self.proc = None
        return code

    def close_output(self):
        self.proc.stdout.close()
        self.proc.stderr.close()

    def cleanup(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.close_output()
            self.proc = None
        if self.owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def request(self, method, path, body=None, token=None, headers=None):
        """Returns (status, headers dict lower-cased, body text)."""
        # `host`: a router in another network namespace (tests/reliability).
        conn = http.client.HTTPConnection(getattr(self, "host", "127.0.0.1"), self.port, timeout=10)
        try:
            hdrs = dict(headers or {})
            token = token if token is not None else self.token
            if token:
                hdrs["Authorization"] = "Bearer " + token
            if body is not None and not isinstance(body, (bytes, str)):
                body = json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=body, headers=hdrs)
            response = conn.getresponse()
            text = response.read().decode()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, text
        finally:
            conn.close()

    def json(self, method, path, body=None, expect=200, **kwargs):
        status, _, text = self.request(method, path, body, **kwargs)
        assert status == expect, "%s %s: expected %d, got %d: %s" % (method, path, expect, status, text)
        return json.loads(text)

    def match(self, body):
        return self.json("POST", "/v1/match", body)

    def sample(self, series, absent=None):
        """The value of one exact series (name and labels) in /metrics."""
        for line in self.request("GET", "/metrics")[2].splitlines():
            if line.startswith(series + " "):
                return float(line.rsplit(" ", 1)[1])
        return absent
