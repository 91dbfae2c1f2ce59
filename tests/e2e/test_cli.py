#!/usr/bin/env python3
"""kvindex-router command line: --help/--version, one-line errors with exit 2
on bad flags, the NATS mode's flag errors, environment variables for
flags, and --data-dir creation.

Usage: test_cli.py BIN_DIR
"""

import os
import shutil
import subprocess
import sys
import tempfile

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvindex_e2e as e2e  # noqa: E402


def run(args, env=None, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def main():
    router = os.path.join(sys.argv[1], "kvindex-router")
    tmp = tempfile.mkdtemp(prefix="kvindex-cli-")
    try:
        out = run([router, "--help"])
        assert out.returncode == 0, out
        for flag in ("--embedded", "--source", "--data-dir", "--http", "--nats",
                     "--checkpoint-interval", "--models", "--config", "--auth-token-file",
                     "--metrics-auth", "--http-threads", "--node"):
            assert flag in out.stdout, "%s missing from --help" % flag
        out = run([router, "--version"])
        assert out.returncode == 0 and "kvindex-router" in out.stdout, out

        out = run([router, "--bogus-flag"])
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out

        out = run([router, "--nats", "nats://127.0.0.1:4222", "--embedded", "--data-dir", tmp,
                   "--http", "127.0.0.1:0"])
        assert out.returncode == 2 and "exclude" in out.stderr, out
        out = run([router, "--data-dir", tmp, "--http", "127.0.0.1:0"])
        assert out.returncode == 2 and "--nats" in out.stderr and "--embedded" in out.stderr, out

        # Flags from the environment: KVINDEX_<FLAG>.
        out = run([router], env={"KVINDEX_NATS": "nats://127.0.0.1:4222", "KVINDEX_DATA_DIR": tmp,
                                 "KVINDEX_STREAM_REPLICAS": "0"})
        assert out.returncode == 2 and "replicas" in out.stderr, out

        out = run([router, "--embedded", "--data-dir", tmp])
        assert out.returncode == 2 and "--source" in out.stderr, out
        assert "--max-registrations" in out.stderr, out
        out = run([router, "--embedded", "--data-dir", tmp, "--max-registrations", "0"])
        assert out.returncode == 2 and "--source" in out.stderr, out
        out = run([router, "--embedded", "--data-dir", tmp, "--source", "worker=w0,engine=nope"])
        assert out.returncode == 2 and "--source" in out.stderr, out
        out = run([router, "--embedded", "--data-dir", tmp, "--checkpoint-interval", "soon",
                   "--source", "worker=w0,engine=vllm,model=m,block_size=4,pub=tcp://127.0.0.1:1"])
        assert out.returncode == 2 and "--checkpoint-interval" in out.stderr, out

        # --data-dir is created, and the environment can carry --embedded and
        # several --source, separated by ';' as for kvindex-agent.
        ctx = zmq.Context()
        engine = e2e.Engine(ctx)
        second = e2e.Engine(ctx)
        data_dir = os.path.join(tmp, "nested", "data")
        proc = e2e.Router(os.path.dirname(router), [], data_dir=data_dir,
                          env={"KVINDEX_SOURCE": engine.source("w0", "m", 4) + ";" +
                               second.source("w1", "m", 4)})
        try:
            proc.start().wait_ready()
            assert os.path.isdir(data_dir)
            workers = sorted(row["worker"] for row in proc.json("GET", "/v1/workers")["workers"])
            assert workers == ["w0", "w1"], workers
            assert proc.stop() == 0
        finally:
            proc.cleanup()
            engine.close()
            second.close()
            ctx.term()
        print("ok: router command line")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
