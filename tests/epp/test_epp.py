#!/usr/bin/env python3
"""End to end: the endpoint picker (ext_proc) of kvindex-router --embedded,
driven the way Envoy's ext_proc filter drives it (epp_harness.py), with
engines publishing real vLLM KV events over ZMQ.

Three engines w0..w2 (endpoint=127.0.0.1:9000..9002); w1 holds the prompt's
blocks, w2 the first of them in the host tier. Checks: the pick follows the
prefix (header, envoy.lb metadata, clear_route_cache, fallbacks); the body
is echoed in chunks of at most 62,000 bytes; BUFFERED mode; trailers; the
response path in order with the served endpoint counted; the subset hint
and its 503; 503 for a model without endpoints; fail-open on a bad body; a
second router fails closed (400, 413) and sheds (429); text prompts through a render server
(--render-url) and its failure (load-only, counted); cancel mid-stream and a stream
without its body are counted and leave nothing in flight; health on both
ports, NOT_SERVING while an engine's replay is held back.

Usage: test_epp.py BIN_DIR
"""

import http.server
import json
import os
import re
import sys
import tempfile
import threading
import time

import grpc
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, HERE)
import kvindex_e2e as e2e  # noqa: E402
import epp_harness as h  # noqa: E402

B = 4
MODEL = "m"
TOKENS = list(range(1, 17))  # 4 blocks
EP = ["127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"]
SERVING, NOT_SERVING = 1, 2


class HeldEngine(e2e.Engine):
    """An engine whose replay socket answers only once `release` is set."""

    def __init__(self, ctx):
        self.release = threading.Event()
        super().__init__(ctx)

    def _serve_replay(self):
        while not self.release.is_set() and not self.stop.is_set():
            time.sleep(0.02)
        super()._serve_replay()


class RenderHandler(http.server.BaseHTTPRequestHandler):
    """A vLLM-style render server: a text prompt "hello" renders to TOKENS; any
    other text answers 500 (the picker falls back to a load-only pick)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ok = self.path == "/v1/completions/render" and body.get("prompt") == "hello"
        answer = json.dumps([{"token_ids": TOKENS}] if ok else {"error": "no"}).encode()
        self.send_response(200 if ok else 500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def metric(router, name, labels):
    text = router.request("GET", "/metrics")[2]
    want = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return 0.0


def body_of(tokens, model=MODEL, pad=0):
    body = {"model": model, "prompt": tokens, "max_tokens": 1}
    if pad:
        body["user"] = "x" * pad
    return json.dumps(body).encode()


def streamed_pick(channel, body, chunks=2, **headers):
    """Headers, the body in `chunks` pieces; returns (pick answer, echoed body, chunk sizes)."""
    s = h.Stream(channel)
    s.headers(**headers)
    step = max(1, len(body) // chunks)
    pieces = [body[i:i + step] for i in range(0, len(body), step)]
    for i, piece in enumerate(pieces):
        s.body(piece, i == len(pieces) - 1)
    first = s.recv()
    if first.WhichOneof("response") == "immediate_response":
        s.close()
        return s, first, None, None
    assert first.WhichOneof("response") == "request_headers", first
    echoed, sizes = b"", []
    while True:
        r = s.recv()
        assert r.WhichOneof("response") == "request_body", r
        chunk = r.request_body.response.body_mutation.streamed_response
        echoed += chunk.body
        sizes.append(len(chunk.body))
        if chunk.end_of_stream:
            break
    return s, first, echoed, sizes


def finish(s):
    s.close()
    assert s.finished()


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engines = [e2e.Engine(ctx), e2e.Engine(ctx), HeldEngine(ctx)]
    routers = []
    render = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RenderHandler)
    threading.Thread(target=render.serve_forever, daemon=True).start()
    try:
        seq = e2e.canonical(TOKENS, B)
        engines[1].publish([engines[1].stored([11, 12, 13, 14], TOKENS, B)])
        engines[2].publish([engines[2].stored([21], TOKENS[:4], B, medium="CPU")])
        sources = [e.source("w%d" % i, MODEL, B) + ",endpoint=" + EP[i]
                   for i, e in enumerate(engines)]
        epp_port, health_port = e2e.free_port(), e2e.free_port()
        router = e2e.Router(bin_dir, sources, extra_args=[
            "--epp", "127.0.0.1:%d" % epp_port, "--epp-health", "127.0.0.1:%d" % health_port,
            "--render-url", "http://127.0.0.1:%d" % render.server_address[1],
            "--render-timeout", "2s",
            # Nothing serves /metrics at EP: no load signals (an engine whose
            # /metrics fails is unhealthy); test_epp_fleet.py covers them.
            "--load-interval", "0"])
        # w2's startup replay must wait for us: a long replay deadline.
        router.args[router.args.index("--replay-timeout") + 1] = "30s"
        router.start()
        routers.append(router)
        channel = grpc.insecure_channel("127.0.0.1:%d" % epp_port)
        health_channel = grpc.insecure_channel("127.0.0.1:%d" % health_port)

        # Health while catching up: w2's replay is held back, the router is not ready.
        def alive():
            if router.proc.poll() is not None:
                raise AssertionError("router exited: " + router.logs())
            return h.health(health_channel, "liveness") == SERVING
        e2e.wait_for(alive, 20, "liveness")
        assert router.request("GET", "/readyz")[0] == 503
        for ch in (channel, health_channel):
            for service in ("", "envoy.service.ext_proc.v3.ExternalProcessor", "readiness"):
                assert h.health(ch, service) == NOT_SERVING, (service, h.health(ch, service))
        engines[2].release.set()
        router.wait_ready()
        for ch in (channel, health_channel):
            for service in ("", "envoy.service.ext_proc.v3.ExternalProcessor", "readiness",
                            "liveness"):
                e2e.wait_for(lambda: h.health(ch, service) == SERVING, 5, "SERVING " + service)
        e2e.wait_for(lambda: len(router.match({"model": MODEL, "tokens": TOKENS})["workers"]) == 2,
                     10, "w1 and w2 in the index")
        assert seq  # hashes computed independently; the router matched them above

        # 1. The pick follows the prefix: w1 holds all 4 blocks, w2 one in host.
        s, first, echoed, sizes = streamed_pick(channel, body_of(TOKENS))
        header, meta, clear = h.pick_of(first)
        assert header == meta and clear, (header, meta, clear)
        assert header == ",".join([EP[1], EP[2], EP[0]]), header
        assert echoed == body_of(TOKENS) and sizes[-1] > 0
        finish(s)

        # Text prompts: tokens from the render server follow the prefix too; a render
        # failure is a load-only pick, counted.
        text = json.dumps({"model": MODEL, "prompt": "hello"}).encode()
        prefix_picks = metric(router, "kvindex_router_epp_picks_total", {"kind": "prefix"})
        s, first, _, _ = streamed_pick(channel, text)
        assert h.pick_of(first)[0] == ",".join([EP[1], EP[2], EP[0]]), h.pick_of(first)
        finish(s)
        assert metric(router, "kvindex_router_epp_picks_total",
                      {"kind": "prefix"}) == prefix_picks + 1
        failed = metric(router, "kvindex_router_epp_token_sources_total",
                        {"source": "render", "outcome": "failed"})
        s, first, _, _ = streamed_pick(channel, json.dumps({"model": MODEL, "prompt": "x"}).encode())
        assert h.pick_of(first)[0].split(",")[0] in EP
        finish(s)
        assert metric(router, "kvindex_router_epp_token_sources_total",
                      {"source": "render", "outcome": "failed"}) == failed + 1

        # 2. A large body (~200 KB): echoed whole in chunks of <= 62,000 bytes.
        big = body_of(TOKENS, pad=200_000)
        s, first, echoed, sizes = streamed_pick(channel, big, chunks=7)
        assert h.pick_of(first)[0].startswith(EP[1])
        assert echoed == big and max(sizes) <= 62_000 and len(sizes) >= 4, sizes
        finish(s)

        # 3. BUFFERED: headers answered at once, the pick on the body answer.
        s = h.Stream(channel)
        s.headers(mode=h.pb.BUFFERED, response_mode=h.pb.BUFFERED)
        r = s.recv()
        assert r.WhichOneof("response") == "request_headers"
        assert not r.request_headers.response.header_mutation.set_headers
        s.body(body_of(TOKENS), True)
        r = s.recv()
        assert r.WhichOneof("response") == "request_body", r
        assert h.pick_of(r)[0].startswith(EP[1]) and h.pick_of(r)[2]
        assert not r.request_body.response.HasField("body_mutation")
        # Response path, buffered: plain answers in order.
        s.response_headers(served=EP[1])
        assert s.recv().WhichOneof("response") == "response_headers"
        s.response_body(b"{}", True)
        r = s.recv()
        assert r.WhichOneof("response") == "response_body" and \
            not r.response_body.response.HasField("body_mutation")
        finish(s)

        # 4. Trailers decide; the echo does not end the stream; then the trailers' answer;
        # response headers, streamed body (echoed), trailers, in order.
        s = h.Stream(channel)
        s.headers()
        s.body(body_of(TOKENS), False)
        s.trailers()
        assert h.pick_of(s.recv())[0].startswith(EP[1])
        r = s.recv()
        assert r.request_body.response.body_mutation.streamed_response.body == body_of(TOKENS)
        assert not r.request_body.response.body_mutation.streamed_response.end_of_stream
        assert s.recv().WhichOneof("response") == "request_trailers"
        served_before = metric(router, "kvindex_router_epp_served_total", {"result": "fallback"})
        s.response_headers(served=EP[2])  # a fallback served it
        assert s.recv().WhichOneof("response") == "response_headers"
        s.response_body(b"data: 1\n\n", False)
        s.response_body(b"data: [DONE]\n\n", True)
        r1, r2 = s.recv(), s.recv()
        assert r1.response_body.response.body_mutation.streamed_response.body == b"data: 1\n\n"
        assert r2.response_body.response.body_mutation.streamed_response.end_of_stream
        s.response_trailers()
        assert s.recv().WhichOneof("response") == "response_trailers"
        finish(s)
        assert metric(router, "kvindex_router_epp_served_total",
                      {"result": "fallback"}) == served_before + 1

        # 5. Subset hint: only w0 allowed -> w0 alone; an unknown address -> 503.
        s, first, _, _ = streamed_pick(channel, body_of(TOKENS), subset=[EP[0]])
        assert h.pick_of(first)[0] == EP[0], h.pick_of(first)
        finish(s)
        s, first, _, _ = streamed_pick(channel, body_of(TOKENS), subset=["127.0.0.9:1"])
        assert first.immediate_response.status.code == 503, first
        # A model no endpoint serves -> 503.
        s, first, _, _ = streamed_pick(channel, body_of(TOKENS, model="other"))
        assert first.immediate_response.status.code == 503, first

        # 6. Fail open: a body that is not JSON gets a load-only pick, echoed as is.
        load_only = metric(router, "kvindex_router_epp_picks_total", {"kind": "load_only"})
        s, first, echoed, _ = streamed_pick(channel, b"not json{")
        assert h.pick_of(first)[0].split(",")[0] in EP and echoed == b"not json{", (h.pick_of(first), echoed)
        finish(s)
        assert metric(router, "kvindex_router_epp_picks_total",
                      {"kind": "load_only"}) == load_only + 1
        # A request without a body: picked at the headers (load-only).
        s = h.Stream(channel)
        s.headers(end_of_stream=True)
        assert h.pick_of(s.recv())[0].split(",")[0] in EP
        finish(s)

        # 7. Cancel mid-stream, and a stream whose body never comes: ended, counted,
        # nothing left in flight.
        cancelled = metric(router, "kvindex_router_epp_streams_total", {"end": "cancelled"})
        no_body = metric(router, "kvindex_router_epp_streams_total", {"end": "no_body"})
        s = h.Stream(channel)
        s.headers()
        s.body(body_of(TOKENS)[:10], False)
        time.sleep(0.2)
        s.cancel()
        s = h.Stream(channel)
        s.headers()
        finish(s)
        e2e.wait_for(lambda: metric(router, "kvindex_router_epp_streams_total",
                                    {"end": "cancelled"}) == cancelled + 1, 5, "cancel counted")
        e2e.wait_for(lambda: metric(router, "kvindex_router_epp_streams_total",
                                    {"end": "no_body"}) == no_body + 1, 5, "no body counted")
        e2e.wait_for(lambda: router.request("GET", "/metrics")[2].find(
            "kvindex_router_epp_streams_open 0") >= 0, 5, "no stream open")

        # 8. In-flight picks spread a load-only burst: three open picks, three endpoints.
        open_streams, picked = [], []
        for _ in range(3):
            s = h.Stream(channel)
            s.headers(end_of_stream=True)
            picked.append(h.pick_of(s.recv())[0].split(",")[0])
            open_streams.append(s)
        assert sorted(picked) == EP, picked
        for s in open_streams:
            finish(s)

        # 9. Fail closed (a second router): bad body -> 400, oversize -> 413.
        closed_port = e2e.free_port()
        config = os.path.join(tempfile.mkdtemp(prefix="kvindex-epp-"), "epp.yaml")
        with open(config, "w") as f:
            f.write("max_inflight_per_endpoint: 1\n")
        closed = e2e.Router(bin_dir, sources[:2], extra_args=[
            "--epp", "127.0.0.1:%d" % closed_port, "--epp-failure-mode", "closed",
            "--epp-max-body-bytes", "1000", "--epp-config", config,
            "--load-interval", "0"]).start()
        routers.append(closed)
        closed.wait_ready()
        closed_channel = grpc.insecure_channel("127.0.0.1:%d" % closed_port)
        e2e.wait_for(lambda: h.health(closed_channel, "readiness") == SERVING, 10, "closed ready")
        _, first, _, _ = streamed_pick(closed_channel, b"not json{")
        assert first.immediate_response.status.code == 400, first
        _, first, _, _ = streamed_pick(closed_channel, body_of(TOKENS, pad=2000), chunks=3)
        assert first.immediate_response.status.code == 413, first
        assert metric(closed, "kvindex_router_epp_streams_total", {"end": "oversize"}) == 1
        # Shedding: one pick in flight per endpoint at most; both held -> 429.
        held = []
        for _ in range(2):
            s = h.Stream(closed_channel)
            s.headers(end_of_stream=True)
            held.append((s, h.pick_of(s.recv())[0].split(",")[0]))
        assert sorted(p for _, p in held) == EP[:2], held
        s = h.Stream(closed_channel)
        s.headers(end_of_stream=True)
        assert s.recv().immediate_response.status.code == 429
        for s, _ in held:
            finish(s)
        # Oversize on the open router is passed through with a load-only pick.
        closed_channel.close()

        # Predict on route (on by default): the picks above were recorded as
        # speculative entries; a removal from w1, applied by the router, drops
        # w1's entries (the apply loop feeds the picker).
        assert metric(router, "kvindex_router_epp_speculative_blocks_total",
                      {"outcome": "recorded"}) > 0

        def invalidations():
            text = router.request("GET", "/metrics")[2]
            m = re.search(r"^kvindex_router_epp_speculative_invalidations_total (\S+)$", text, re.M)
            return float(m.group(1)) if m else 0.0
        before = invalidations()
        engines[1].publish([engines[1].removed([14])])
        e2e.wait_for(lambda: invalidations() > before, 10, "w1's speculative entries dropped")

        for r in routers:
            assert r.stop() == 0, r.logs()
        routers.clear()
        channel.close()
        health_channel.close()
        print("1 passed, 0 failed")
    finally:
        render.shutdown()
        render.server_close()
        for r in routers:
            r.cleanup()
        for e in engines:
            e.close()
        ctx.term()


if __name__ == "__main__":
    main()
