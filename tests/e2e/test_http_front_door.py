#!/usr/bin/env python3
"""The HTTP front door of a real kvindex-router --embedded (issue #11): idle
and slow clients, strict HTTP/1.1 framing, load shedding, deadlines, and the
start-up checks of --http and --auth-token-file. Loopback only; every wait
is bounded.

Usage: test_http_front_door.py BIN_DIR [ROUTER_ARGS...]
  (e.g. --http-server civetweb to watch the former server fail)
Every check runs even when an earlier one failed; exit 1 if any failed.
"""

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402

TOKEN = "front-door-token"
EXTRA = []
MATCH = json.dumps({"model": "m", "tokens": [1, 2, 3, 4]})


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


_pending = {}  # socket -> bytes read past the previous response


def read_response(s, head_only=False):
    """Reads one response; returns (status, headers lower-cased, body bytes).
    Raises on a reset (the client must be able to read every answer)."""
    data = _pending.pop(s, b"")
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("connection closed before a response: %r" % data)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = 0 if head_only else int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    if len(rest) > length:
        _pending[s] = rest[length:]
    return status, headers, rest[:length]


def exchange(port, raw, head_only=False):
    with connect(port) as s:
        s.sendall(raw)
        return read_response(s, head_only)


def expect_json_error(got, status, fragment):
    code, headers, body = got
    assert code == status, "expected %d, got %d: %r" % (status, code, body)
    assert headers.get("content-type") == "application/json", headers
    error = json.loads(body)["error"]
    assert fragment in error, "error %r does not mention %r" % (error, fragment)
    return headers


def auth(extra=""):
    return "Host: x\r\nAuthorization: Bearer %s\r\n%s" % (TOKEN, extra)


def timed_healthz(port):
    start = time.monotonic()
    got = exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    elapsed = time.monotonic() - start
    assert got[0] == 200, got
    return elapsed


def check_strict(port):
    # Conflicting lengths and CL + TE: refused, never guessed.
    expect_json_error(exchange(port, ("POST /v1/match HTTP/1.1\r\n" + auth() +
                                      "Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef")
                               .encode()), 400, "Content-Length")
    expect_json_error(exchange(port, ("POST /v1/match HTTP/1.1\r\n" + auth() +
                                      "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "0\r\n\r\n").encode()), 400, "Transfer-Encoding")
    expect_json_error(exchange(port, ("POST /v1/match HTTP/1.1\r\n" + auth() +
                                      "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
                                      "0\r\n\r\n").encode()), 400, "Content-Length")
    # NUL and invalid bytes in the target, raw or escaped.
    expect_json_error(exchange(port, ("GET /healthz%00x HTTP/1.1\r\n" + auth() + "\r\n").encode()),
                      400, "NUL")
    expect_json_error(exchange(port, b"GET /health\x01z HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "")
    expect_json_error(exchange(port, b"GET /h\xffz HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "")
    expect_json_error(exchange(port, b"GET * HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "origin-form")
    # Absolute-form is served.
    got = exchange(port, b"GET http://example.com/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got[0] == 200, got
    # HEAD where GET exists: the headers, no body.
    with connect(port) as s:
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        code, headers, _ = read_response(s, head_only=True)
        assert code == 200 and int(headers["content-length"]) > 0, (code, headers)
        length = headers["content-length"]
        code, headers, body = read_response(s)  # the next response follows at once
        assert headers["content-length"] == length, headers
        assert code == 200 and len(body) == int(headers["content-length"]), (code, body)
    # Auth before routing: an unknown path without the token is 401, not 404.
    expect_json_error(exchange(port, b"GET /no/such/path HTTP/1.1\r\nHost: x\r\n\r\n"), 401,
                      "bearer token")
    expect_json_error(exchange(port, b"DELETE /v1/match HTTP/1.1\r\nHost: x\r\n\r\n"), 401,
                      "bearer token")
    expect_json_error(exchange(port, ("GET /no/such/path HTTP/1.1\r\n" + auth() + "\r\n").encode()),
                      404, "/no/such/path")
    # Malformed request line: JSON too.
    expect_json_error(exchange(port, b"GARBAGE\r\n\r\n"), 400, "malformed")
    print("ok: strict HTTP/1.1")


def check_continue_and_413(port):
    # 100-continue: answered before the body is sent.
    with connect(port) as s:
        s.sendall(("POST /v1/match HTTP/1.1\r\n" + auth("Expect: 100-continue\r\n") +
                   "Content-Length: %d\r\n\r\n" % len(MATCH)).encode())
        s.settimeout(2)
        interim = s.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        s.settimeout(10)
        s.sendall(MATCH.encode())
        code, _, body = read_response(s)
        assert code == 200 and b"w0" in body, (code, body)
    # Too large with 100-continue: 413 at once, no 100.
    with connect(port) as s:
        s.sendall(("POST /v1/match HTTP/1.1\r\n" + auth("Expect: 100-continue\r\n") +
                   "Content-Length: %d\r\n\r\n" % (2 << 20)).encode())
        s.settimeout(2)
        expect_json_error(read_response(s), 413, "exceeds the limit of 1048576 bytes")
    # A client that sends its whole 4 MiB body before reading still reads
    # the 413 (lingering close), not a reset.
    with connect(port) as s:
        s.sendall(("POST /v1/match HTTP/1.1\r\n" + auth() + "Content-Length: %d\r\n\r\n"
                   % (4 << 20)).encode() + b"x" * (4 << 20))
        expect_json_error(read_response(s), 413, "exceeds the limit")
    # Chunked beyond the limit: 413 as well.
    chunk = b"100000\r\n" + b"z" * 0x100000 + b"\r\n"
    with connect(port) as s:
        s.sendall(("POST /v1/match HTTP/1.1\r\n" + auth() + "Transfer-Encoding: chunked\r\n\r\n")
                  .encode() + chunk * 2 + b"0\r\n\r\n")
        expect_json_error(read_response(s), 413, "exceeds the limit")
    print("ok: 100-continue, early 413 read by the client")


def trickle(s, byte):
    """Sends `byte` every 0.25 s until the server answers (at most 10 s)."""
    for _ in range(40):
        if select.select([s], [], [], 0.25)[0]:
            return
        s.sendall(byte)


def check_deadlines(port):
    # Slow header: a byte every 0.25 s keeps it moving, yet the total
    # deadline (1 s) ends it with 408.
    start = time.monotonic()
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        trickle(s, b"X")
        expect_json_error(read_response(s), 408, "header")
    assert time.monotonic() - start < 4, time.monotonic() - start
    # Slow body: same, 408 from the body deadline.
    start = time.monotonic()
    with connect(port) as s:
        s.sendall(("POST /v1/match HTTP/1.1\r\n" + auth() + "Content-Length: 100\r\n\r\n")
                  .encode())
        trickle(s, b"{")
        expect_json_error(read_response(s), 408, "body")
    assert time.monotonic() - start < 4, time.monotonic() - start
    # Idle keep-alive: closed after the idle timeout (1 s).
    with connect(port) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s)[0] == 200
        start = time.monotonic()
        s.settimeout(5)
        assert s.recv(1) == b"", "an idle connection was not closed"
        assert 0.5 < time.monotonic() - start < 3, time.monotonic() - start
    print("ok: header, body and idle deadlines")


def connect_from(port, source_address):
    """A connection from another loopback address: another client."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source_address, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def check_flood_and_shedding(bin_dir, source):
    router = e2e.Router(bin_dir, [source], extra_args=["--http-max-connections", "600"] + EXTRA)
    held = []
    try:
        router.start().wait_ready()
        # Issue #21's reproduction: idle connections from one client (600,
        # the whole limit) kept /v1/workers out (503) for the idle timeout.
        # Now the oldest idle one is closed for each newcomer.
        for _ in range(600):
            held.append(connect_from(router.port, "127.0.0.2"))
        time.sleep(0.3)
        for _ in range(3):
            code, _, body = exchange(router.port, b"GET /v1/workers HTTP/1.1\r\nHost: x\r\n\r\n")
            assert code == 200, "idle connections kept /v1/workers out: %d %r" % (code, body)
        for s in held:
            s.close()
        held = []
        time.sleep(0.3)
        # 600 busy connections (half a header each) from three clients
        # (200 each, under the per-client limit of 300): the limit. Probes
        # are still served at once, the API is shed with 503 + Retry-After.
        for i in range(600):
            s = connect_from(router.port, "127.0.0.%d" % (2 + i % 3))
            s.sendall(b"GET /v1/workers HTTP/1.1\r\nHost:")
            held.append(s)
        time.sleep(0.3)
        worst = max(timed_healthz(router.port) for _ in range(20))
        assert worst < 0.1, "/healthz took %.3f s with 600 clients holding connections" % worst
        code, _, _ = exchange(router.port, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert code == 200, code
        headers = expect_json_error(exchange(router.port,
                                             b"GET /v1/workers HTTP/1.1\r\nHost: x\r\n\r\n"),
                                    503, "too many connections")
        assert headers.get("retry-after") == "1", headers
        # Under pressure (3/4 of the limit) a header gets 2 s, not the
        # configured 10 s: the slow ones are gone well before that.
        e2e.wait_for(lambda: router.request("GET", "/v1/workers")[0] == 200, 6,
                     "/v1/workers served again once the slow headers timed out")
        for s in held:
            s.close()
        held = []
        # One client past its share (300 requests in progress): its further
        # requests are shed, another client's are served.
        for _ in range(300):
            s = connect_from(router.port, "127.0.0.5")
            s.sendall(b"GET /v1/workers HTTP/1.1\r\nHost:")
            held.append(s)
        time.sleep(0.3)
        with connect_from(router.port, "127.0.0.5") as s:
            s.sendall(b"GET /v1/workers HTTP/1.1\r\nHost: x\r\n\r\n")
            expect_json_error(read_response(s), 503, "too many connections")
        code, _, _ = exchange(router.port, b"GET /v1/workers HTTP/1.1\r\nHost: x\r\n\r\n")
        assert code == 200, code
        for s in held:
            s.close()
        held = []
        assert router.stop() == 0
        print("ok: idle connections closed for new ones; /healthz within %.1f ms under 600 held "
              "connections; 503 + Retry-After past the limit; per-client share" % (worst * 1000))
    finally:
        for s in held:
            s.close()
        router.cleanup()


def stream_until_closed(port, head, filler, total, seconds=4.0):
    """Sends `head` then `filler` repeatedly (up to `total` bytes) until the
    server answers or closes, or `seconds` pass; returns the reply."""
    s = connect(port)
    s.setblocking(False)
    sent, reply = 0, b""
    deadline = time.monotonic() + seconds
    data = head
    try:
        while time.monotonic() < deadline and sent < total:
            readable, writable, _ = select.select([s], [s], [], 0.1)
            if readable:
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
                continue
            if writable:
                try:
                    n = s.send(data if data else filler)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    break
                if data:
                    data = data[n:]
                else:
                    sent += n
    finally:
        s.close()
    return reply


def check_memory_bounds(bin_dir, source):
    """Issue #21's reproductions, measured on the router's RSS: a chunk
    extension that never ends (1 GiB took a router from 42 MB to 1.12 GB,
    even on the open /healthz of a router with a token), trailers that never
    end, and many bodies at once (1,024 x 8 MiB allowed). Each is bounded:
    RSS grows by less than 40 MB while 256 MiB are sent at it."""
    with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
        f.write(TOKEN + "\n")
        token_file = f.name
    router = e2e.Router(bin_dir, [source],
                        extra_args=["--auth-token-file", token_file, "--max-body-bytes", "1048576",
                                    "--http-max-body-total-bytes", "8388608"] + EXTRA)
    held = []
    try:
        router.start().wait_ready()
        base = e2e.rss_mb(router.proc.pid)
        filler = b"e" * 65536
        reply = stream_until_closed(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                    b"Transfer-Encoding: chunked\r\n\r\n1;", filler, 256 << 20)
        assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
        grown = e2e.rss_mb(router.proc.pid) - base
        assert grown < 40, "a chunk extension grew the router by %.0f MB" % grown
        reply = stream_until_closed(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
                                    b"Transfer-Encoding: chunked\r\n\r\n0\r\n",
                                    b"X-T: vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n" * 1000,
                                    256 << 20)
        assert reply.startswith(b"HTTP/1.1 431"), reply[:200]
        grown = max(grown, e2e.rss_mb(router.proc.pid) - base)
        assert grown < 40, "trailers grew the router by %.0f MB" % grown
        # 64 clients announce 1 MiB bodies (authenticated) and send all but
        # the last byte: at most 8 MiB of them are held, the rest get 503.
        head = ("POST /v1/match HTTP/1.1\r\n" + auth() + "Content-Length: %d\r\n\r\n"
                % (1 << 20)).encode()
        refused = 0
        for _ in range(64):
            s = connect(router.port)
            s.sendall(head)
            held.append(s)
        time.sleep(0.3)
        for s in held:
            s.setblocking(False)
            try:
                s.send(b"{" * ((1 << 20) - 1))
            except OSError:
                pass
        time.sleep(0.5)
        for s in held:
            s.setblocking(True)
            s.settimeout(0.2)
            try:
                if s.recv(64).startswith(b"HTTP/1.1 503"):
                    refused += 1
            except (socket.timeout, OSError):
                pass
        grown = max(grown, e2e.rss_mb(router.proc.pid) - base)
        assert refused >= 50, "only %d of 64 bodies refused past an 8 MiB budget" % refused
        assert grown < 40, "64 bodies of 1 MiB grew the router by %.0f MB" % grown
        code, _, _ = exchange(router.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert code == 200, code
        for s in held:
            s.close()
        held = []
        assert router.stop() == 0
        print("ok: chunk extension, trailers and 64 x 1 MiB bodies bounded (RSS +%.1f MB, %d "
              "bodies refused with 503)" % (grown, refused))
    finally:
        for s in held:
            s.close()
        router.cleanup()
        os.unlink(token_file)


def check_startup(bin_dir, source):
    data_dir = tempfile.mkdtemp(prefix="kvindex-front-door-")
    bad = subprocess.run([os.path.join(bin_dir, "kvindex-router"), "--embedded", "--source", source,
                          "--data-dir", data_dir, "--http", "999.1.1.1:1"],
                         capture_output=True, text=True, timeout=20)
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    assert "999.1.1.1:1" in bad.stderr, bad.stderr
    print("ok: --http 999.1.1.1:1 refused with exit 2")


FAILED = []


def run_check(name, fn, *args):
    try:
        fn(*args)
    except (AssertionError, OSError) as error:
        FAILED.append(name)
        print("FAILED: %s: %r" % (name, error))


def main():
    bin_dir = sys.argv[1]
    global EXTRA
    EXTRA = sys.argv[2:]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    engine.publish([engine.stored([1], [1, 2, 3, 4], 4)])
    source = engine.source("w0", "m", 4)
    with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
        f.write("  " + TOKEN + "  \nsecond-line-secret\n")
        token_file = f.name
    router = e2e.Router(bin_dir, [source],
                        extra_args=["--auth-token-file", token_file, "--max-body-bytes", "1048576",
                                    "--http-idle-timeout", "1s", "--http-header-timeout", "1s",
                                    "--http-body-timeout", "1s"] + EXTRA)
    try:
        router.start().wait_ready()
        router.token = TOKEN
        e2e.wait_for(lambda: b"w0" in exchange(router.port, ("POST /v1/match HTTP/1.1\r\n" + auth()
                                                            + "Content-Length: %d\r\n\r\n%s"
                                                            % (len(MATCH), MATCH)).encode())[2],
                     10, "the stored block indexed")
        run_check("strict", check_strict, router.port)
        run_check("continue_and_413", check_continue_and_413, router.port)
        run_check("deadlines", check_deadlines, router.port)
        router.proc.terminate()
        assert router.proc.wait(timeout=20) == 0
        logs = router.logs()
        router.close_output()
        router.proc = None
    finally:
        router.cleanup()
        os.unlink(token_file)
    # The token file: first line, trimmed; a warning names the file, never
    # the content.
    def check_token_file():
        assert token_file in logs and "more than one line" in logs, logs
        assert "second-line-secret" not in logs and TOKEN not in logs, logs
        print("ok: token file first line, warning names the file")
    run_check("token_file", check_token_file)
    try:
        run_check("flood_and_shedding", check_flood_and_shedding, bin_dir, source)
        run_check("memory_bounds", check_memory_bounds, bin_dir, source)
        run_check("startup", check_startup, bin_dir, source)
    finally:
        engine.close()
        ctx.term()
    if FAILED:
        print("FAILED checks: %s" % ", ".join(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
