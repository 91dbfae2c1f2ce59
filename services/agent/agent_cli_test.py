#!/usr/bin/env python3
"""kvindex-agent binary test: flags, exit codes, environment, and a real run
against a python ZMQ engine (XPUB, so the test knows when the subscription is
live) and a ROUTER replay socket, with --output jsonl and HTTP endpoints.

usage: agent_cli_test.py PATH_TO_kvindex-agent
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import msgpack
import zmq

AGENT = sys.argv[1]
DEADLINE = 15.0


def run(args, env=None, timeout=10):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("KVINDEX_"):
            del e[k]
    if env:
        e.update(env)
    return subprocess.run([AGENT] + args, capture_output=True, text=True, env=e, timeout=timeout)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def check(cond, message):
    if not cond:
        print("FAIL:", message, file=sys.stderr)
        sys.exit(1)


SOURCE = "worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://127.0.0.1:1"

# --help / --version
r = run(["--help"])
check(r.returncode == 0 and "--source" in r.stdout and "--nats" in r.stdout, "--help: %r" % (r,))
r = run(["--version"])
check(r.returncode == 0 and "kvindex-agent" in r.stdout, "--version: %r" % (r,))

# Bad flags: one line on stderr, exit 2.
for args in (["--bogus"], ["--source", SOURCE, "--output", "jsonl"],
             ["--node", "n", "--source", "worker=w0", "--output", "jsonl"],
             ["--node", "n", "--source", SOURCE, "--output", "jsonl", "--lease", "soon"],
             ["--node", "n", "--source", SOURCE, "--output", "xml"],
             ["--node", "n", "--source", SOURCE],
             ["--node", "n", "--output", "jsonl", "--source",
              "worker=w0,engine=vllm,model=M,block_size=16,pub=nonsense://x"]):
    r = run(args)
    check(r.returncode == 2, "exit code for %s: %r" % (args, r))
    check(r.stderr.strip().count("\n") == 0 and r.stderr.strip(), "one-line error for %s: %r" % (args, r.stderr))

# --nats: one output at a time, and bad NATS settings are flag errors (the
# JetStream path itself is covered by tests/distributed).
r = run(["--nats", "nats://127.0.0.1:4222", "--node", "n", "--source", SOURCE, "--output", "jsonl"])
check(r.returncode == 2 and "exclude" in r.stderr, "--nats with --output: %r" % (r,))
r = run([], env={"KVINDEX_NATS": "nats://127.0.0.1:4222", "KVINDEX_NODE": "n",
                 "KVINDEX_SOURCE": SOURCE, "KVINDEX_STREAM_REPLICAS": "0"})
check(r.returncode == 2 and "replicas" in r.stderr, "KVINDEX_STREAM_REPLICAS=0: %r" % (r,))
r = run(["--node", "n", "--source", SOURCE])
check(r.returncode == 2 and "--nats" in r.stderr, "no output: %r" % (r,))


def stored_batch(i, ts=1.0):
    tokens = list(range(16 * i, 16 * i + 16))
    event = ["BlockStored", [1000 + i], None, tokens, 16, None, "GPU", None, None, None, None, None]
    return msgpack.packb([ts, [event], 0])


# A real run: engine PUB (XPUB) + replay ROUTER, configured from the environment.
ctx = zmq.Context()
pub = ctx.socket(zmq.XPUB)
pub.setsockopt(zmq.LINGER, 0)
pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
router = ctx.socket(zmq.ROUTER)
router.setsockopt(zmq.LINGER, 0)
replay_port = router.bind_to_random_port("tcp://127.0.0.1")
http_port = free_port()
source = ("worker=w0,engine=vllm,model=M,block_size=16,pub=tcp://127.0.0.1:%d,"
          "replay=tcp://127.0.0.1:%d" % (pub_port, replay_port))
env = dict(os.environ)
env.update({"KVINDEX_NODE": "node-a", "KVINDEX_SOURCE": source, "KVINDEX_OUTPUT": "jsonl",
            "KVINDEX_HTTP": "127.0.0.1:%d" % http_port, "KVINDEX_LOG_FORMAT": "json"})
agent = subprocess.Popen([AGENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
try:
    # Start-up replay request from seq 0: answer with batch 0, old layout.
    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    check(poller.poll(DEADLINE * 1000), "no replay request")
    identity, empty, seq = router.recv_multipart()
    check(empty == b"" and int.from_bytes(seq, "big") == 0, "replay request %r" % seq)
    router.send_multipart([identity, b"", (0).to_bytes(8, "big"), stored_batch(0)])
    router.send_multipart([identity, b"", b"\xff" * 8, b""])

    # Subscription live?
    poller = zmq.Poller()
    poller.register(pub, zmq.POLLIN)
    check(poller.poll(DEADLINE * 1000), "no subscription")
    check(pub.recv()[:1] == b"\x01", "subscription message")

    # Ready once the start-up replay is done.
    deadline = time.time() + DEADLINE
    ready = False
    while time.time() < deadline and not ready:
        try:
            ready = urllib.request.urlopen("http://127.0.0.1:%d/readyz" % http_port, timeout=2).status == 200
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    check(ready, "/readyz never 200")

    pub.send_multipart([b"kv-events", (1).to_bytes(8, "big"), stored_batch(1)])
    events = []
    deadline = time.time() + DEADLINE
    while time.time() < deadline:
        line = agent.stdout.readline()
        if not line:
            break
        events.append(json.loads(line))
        if sum(1 for e in events if e["kind"] == "stored") == 2:
            break
    kinds = [e["kind"] for e in events if e["kind"] != "heartbeat"]
    check(kinds == ["cleared", "stored", "stored"], "events: %r" % events)
    ids = [e["event_id"] for e in events]
    check(ids == sorted(ids) and len(set(ids)) == len(ids), "event ids increase: %r" % ids)
    check(all(e["agent"] == "node-a" for e in events), "agent stamped")
    stored = [e for e in events if e["kind"] == "stored"]
    check(stored[0]["worker"] == "w0" and stored[0]["model"] == "M" and
          stored[0]["tier"] == "device" and len(stored[0]["block_hashes"]) == 1, "stored: %r" % stored)

    metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port, timeout=5).read().decode()
    check("kvindex_agent_events_received_total" in metrics, "metrics: %s" % metrics[:500])
    check('kvindex_agent_replays_total{result="ok",source="w0/0"} 1' in metrics, "replay metric")
    health = urllib.request.urlopen("http://127.0.0.1:%d/healthz" % http_port, timeout=5)
    check(health.status == 200, "/healthz")
    sources = json.loads(urllib.request.urlopen("http://127.0.0.1:%d/v1/sources" % http_port,
                                                timeout=5).read())
    check(sources["sources"][0]["last_seq"] == 1 and sources["ready"], "/v1/sources: %r" % sources)

    agent.send_signal(signal.SIGTERM)
    code = agent.wait(timeout=10)
    check(code == 0, "exit code after SIGTERM: %d (stderr %s)" % (code, agent.stderr.read()))
finally:
    if agent.poll() is None:
        agent.kill()
        agent.wait()
    pub.close()
    router.close()
    ctx.term()
print("ok")
