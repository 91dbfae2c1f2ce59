#!/usr/bin/env python3
"""Every error path of the router API, against a real kvindex-router
--embedded with bearer-token authentication (token from a file) and
--metrics-auth: 401, 400 naming the problem, 404, 405, 413 decided from the
Content-Length before the body is read, and the open /healthz and /readyz.

Usage: test_api_errors.py BIN_DIR
"""

import json
import os
import socket
import sys
import tempfile

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402

TOKEN = "e2e-s3cret"


def expect_error(router, method, path, body, status, fragment, token=TOKEN):
    got, headers, text = router.request(method, path, body, token=token)
    assert got == status, "%s %s: expected %d, got %d: %s" % (method, path, status, got, text)
    error = json.loads(text)["error"]
    assert fragment in error, "%s %s: error %r does not mention %r" % (method, path, error, fragment)
    return headers


def raw_request(port, head):
    """Sends only the request head; returns the status line and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head_end = data.find(b"\r\n\r\n")
        length = 0
        for line in data[:head_end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(data) < head_end + 4 + length:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data[:data.find(b"\r\n")].decode(), data[head_end + 4:].decode()


def main():
    bin_dir = sys.argv[1]
    ctx = zmq.Context()
    engine = e2e.Engine(ctx)
    engine.publish([engine.stored([1], [1, 2, 3, 4], 4)])
    with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
        f.write(TOKEN + "\n")
        token_file = f.name
    router = e2e.Router(bin_dir, [engine.source("w0", "m", 4)],
                        extra_args=["--auth-token-file", token_file, "--metrics-auth"])
    try:
        router.start().wait_ready()  # /readyz is open without a token
        router.token = TOKEN

        # Open probes; everything else needs the token.
        assert router.request("GET", "/healthz", token="")[0] == 200
        assert router.request("GET", "/readyz", token="")[0] == 200
        headers = expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [1]}, 401,
                               "bearer token", token="")
        assert headers.get("www-authenticate") == "Bearer", headers
        expect_error(router, "GET", "/v1/state", None, 401, "bearer token", token="wrong")
        expect_error(router, "GET", "/v1/workers", None, 401, "bearer token", token="")
        expect_error(router, "POST", "/query", {"model_name": "m", "token_ids": [1]}, 401,
                     "bearer token", token="")
        expect_error(router, "GET", "/metrics", None, 401, "bearer token", token="")
        assert router.request("GET", "/metrics")[0] == 200

        # 400: each message names the problem.
        expect_error(router, "POST", "/v1/match", '{"model": "m", "tokens": [1, 2', 400,
                     "invalid JSON")
        expect_error(router, "POST", "/v1/match", "", 400, "empty request body")
        expect_error(router, "POST", "/v1/match", "[1, 2]", 400, "must be a JSON object")
        expect_error(router, "POST", "/v1/match", {"tokens": [1]}, 400, "missing field 'model'")
        expect_error(router, "POST", "/v1/match", {"model": "m"}, 400, "missing field 'tokens'")
        expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [1, "x"]}, 400,
                     "'tokens' element 1")
        expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [-1]}, 400,
                     "unsigned 32-bit")
        expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [4294967296]}, 400,
                     "unsigned 32-bit")
        expect_error(router, "POST", "/v1/match", {"model": "m", "local_hashes": [2 ** 64]}, 400,
                     "unsigned 64-bit")
        expect_error(router, "POST", "/v1/match", {"model": "m", "local_hashes": [1.5]}, 400,
                     "unsigned 64-bit")
        expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [1], "local_hashes": [1]},
                     400, "not both")
        expect_error(router, "POST", "/v1/match", {"model": "m", "tokens": [1], "lora_name": 3},
                     400, "'lora_name'")
        expect_error(router, "POST", "/v1/match", '{"model": "m", "tokens": [' +
                     ",".join(["1"] * 1000001) + "]}", 400, "more than 1000000")
        expect_error(router, "POST", "/query", {"token_ids": [1]}, 400, "'model'")

        # 404: unknown model (by name) and unknown endpoint.
        expect_error(router, "POST", "/v1/match", {"model": "nope", "tokens": [1, 2, 3, 4]}, 404,
                     "nope")
        expect_error(router, "POST", "/query", {"model_name": "nope", "token_ids": [1]}, 404,
                     "nope")
        expect_error(router, "GET", "/v2/whatever", None, 404, "/v2/whatever")

        # 405 with Allow.
        headers = expect_error(router, "GET", "/v1/match", None, 405, "not allowed")
        assert headers.get("allow") == "POST", headers
        expect_error(router, "POST", "/v1/state", "{}", 405, "not allowed")
        expect_error(router, "DELETE", "/v1/workers", None, 405, "not allowed")

        # 413 from the Content-Length alone: the 9 MiB body is never sent.
        status, body = raw_request(router.port,
                                   "POST /v1/match HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s"
                                   "\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                   % (TOKEN, 9 << 20))
        assert " 413 " in status, status
        assert "exceeds the limit of 8388608 bytes" in json.loads(body)["error"], body

        # A valid request still works on the same server.
        got = router.match({"model": "m", "tokens": [1, 2, 3, 4]})
        assert got["workers"][0]["worker"] == "w0", got
        assert router.stop() == 0
        print("ok: API error paths")
    finally:
        router.cleanup()
        os.unlink(token_file)
        engine.close()
        ctx.term()


if __name__ == "__main__":
    main()
