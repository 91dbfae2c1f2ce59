#!/usr/bin/env python3
"""End to end: TLS on the endpoint picker (--epp-tls-cert, --epp-tls-key) and
the certificate's rotation without a restart.

Certificates are made at test time with the openssl CLI: CA A signs the
first server certificate, CA B the second. Checks: a client trusting A picks
over TLS (the pick follows the prefix) and sees health SERVING; a cleartext
client and a client trusting only B are refused; the files are replaced
(renamed over, as a Secret update does) with B's pair and, without a
restart, new connections trusting B succeed and new connections trusting A
are refused, while --epp-health stays cleartext; a key that is not the
certificate's, a missing file, or one flag without the other stop the router
with a one-line error.

Usage: test_epp_tls.py BIN_DIR
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # handshake refusals are expected
import grpc  # noqa: E402
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, HERE)
import kvindex_e2e as e2e  # noqa: E402
import epp_harness as h  # noqa: E402

B = 4
MODEL = "m"
TOKENS = list(range(1, 17))
EP = ["127.0.0.1:9000", "127.0.0.1:9001"]
SERVING = 1


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_ca(d, name):
    key, cert = os.path.join(d, name + "-ca.key"), os.path.join(d, name + "-ca.pem")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
            "-days", "1", "-subj", "/CN=kvindex test CA " + name)
    return key, cert


def make_server(d, name, ca_key, ca_cert):
    key, csr, cert = (os.path.join(d, name + s) for s in (".key", ".csr", ".pem"))
    ext = os.path.join(d, name + ".ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
            "-subj", "/CN=kvindex-epp")
    openssl("x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-CAcreateserial",
            "-out", cert, "-days", "1", "-extfile", ext)
    return cert, key


def install(src, dst):
    """Replaces dst atomically (a rename), as a mounted Secret is updated."""
    tmp = dst + ".tmp"
    shutil.copy(src, tmp)
    os.replace(tmp, dst)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def body():
    return json.dumps({"model": MODEL, "prompt": TOKENS, "max_tokens": 1}).encode()


def picks_over(address, ca):
    """The pick header over a new TLS connection trusting `ca`, or the gRPC error code."""
    channel = h.tls_channel(address, ca)
    try:
        return h.pick_of(h.pick(channel, body(), timeout=3))[0]
    except grpc.RpcError as error:
        return error.code()
    finally:
        channel.close()


def refuses_to_start(bin_dir, args, needle):
    proc = subprocess.run([os.path.join(bin_dir, "kvindex-router")] + args,
                          capture_output=True, text=True, timeout=15)
    assert proc.returncode != 0, (args, proc.stderr)
    assert needle in proc.stderr, (needle, proc.stderr)


def main():
    bin_dir = sys.argv[1]
    d = tempfile.mkdtemp(prefix="kvindex-epp-tls-")
    ctx = zmq.Context()
    engines = [e2e.Engine(ctx), e2e.Engine(ctx)]
    router = None
    try:
        a_key, a_ca = make_ca(d, "a")
        b_key, b_ca = make_ca(d, "b")
        a_cert, a_srv_key = make_server(d, "a-server", a_key, a_ca)
        b_cert, b_srv_key = make_server(d, "b-server", b_key, b_ca)
        cert, key = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        install(a_cert, cert)
        install(a_srv_key, key)

        # Bad configurations: a one-line error, no picker that refuses every handshake.
        base = ["--embedded", "--data-dir", os.path.join(d, "bad"), "--http", "127.0.0.1:0",
                "--source", engines[0].source("w0", MODEL, B) + ",endpoint=" + EP[0],
                "--epp", "127.0.0.1:0"]
        refuses_to_start(bin_dir, base + ["--epp-tls-cert", cert],
                         "--epp-tls-cert and --epp-tls-key go together")
        refuses_to_start(bin_dir, base + ["--epp-tls-cert", cert, "--epp-tls-key", b_srv_key],
                         "is not the key of the certificate")
        refuses_to_start(bin_dir, base + ["--epp-tls-cert", os.path.join(d, "none.pem"),
                                          "--epp-tls-key", key], "cannot read")

        engines[1].publish([engines[1].stored([11, 12, 13, 14], TOKENS, B)])
        sources = [e.source("w%d" % i, MODEL, B) + ",endpoint=" + EP[i]
                   for i, e in enumerate(engines)]
        epp_port, health_port = e2e.free_port(), e2e.free_port()
        address = "127.0.0.1:%d" % epp_port
        router = e2e.Router(bin_dir, sources, extra_args=[
            "--epp", address, "--epp-health", "127.0.0.1:%d" % health_port,
            "--epp-tls-cert", cert, "--epp-tls-key", key,
            "--load-interval", "0"])  # fake endpoints: no /metrics to scrape
        router.start()
        router.wait_ready()
        e2e.wait_for(lambda: len(router.match({"model": MODEL, "tokens": TOKENS})["workers"]) == 1,
                     10, "w1 in the index")

        # Over TLS, trusting A: health and a pick that follows the prefix.
        channel = h.tls_channel(address, read(a_ca))
        e2e.wait_for(lambda: h.health(channel, "readiness") == SERVING, 10, "readiness over TLS")
        header = h.pick_of(h.pick(channel, body()))[0]
        assert header == ",".join([EP[1], EP[0]]), header
        # Cleartext on the TLS port, and a client trusting only B: refused.
        plain = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        assert h.health(plain, "") == grpc.StatusCode.UNAVAILABLE
        plain.close()
        assert picks_over(address, read(b_ca)) == grpc.StatusCode.UNAVAILABLE
        # --epp-health stays cleartext (kubelet's gRPC probes).
        health_channel = grpc.insecure_channel("127.0.0.1:%d" % health_port)
        assert h.health(health_channel, "readiness") == SERVING

        # Rotation: B's pair renamed over the files; no restart.
        install(b_cert, cert)
        install(b_srv_key, key)
        e2e.wait_for(lambda: picks_over(address, read(b_ca)) == ",".join([EP[1], EP[0]]), 15,
                     "a pick over TLS trusting the rotated certificate's CA")
        assert picks_over(address, read(a_ca)) == grpc.StatusCode.UNAVAILABLE
        # The connection opened before the rotation keeps working.
        assert h.pick_of(h.pick(channel, body()))[0] == ",".join([EP[1], EP[0]])
        assert router.proc.poll() is None
        channel.close()
        health_channel.close()
        assert router.stop() == 0, router.logs()
        print("e2e_epp_tls: OK")
    finally:
        if router is not None:
            router.cleanup()
        for e in engines:
            e.close()
        ctx.term()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
