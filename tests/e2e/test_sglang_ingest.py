#!/usr/bin/env python3
"""SGLang's ApplyExternalKvBatch (their KV-event bridge's ingest) into a real
`kvindex-router --embedded --sglang-indexer ADDR --sglang-ingest`
(docs/compat.md, "SGLang"), with a python3-grpcio client writing the
protobuf wire by hand from the field numbers of SGLang's kv_indexer.proto:
reported hashes show up in /v1/match and in MatchExternalKvPrefix (with the
batch's worker_address), revokes remove them, a sequence gap clears the
worker first, CLEAR_ALL_AT_TIER clears it; a worker_id naming a --source or
a registered instance is refused, and so is a registration naming a bridge
worker; oversized or malformed batches
(more than 256 actions, a tier outside 1..3, an unknown action) are refused
whole with INVALID_ARGUMENT and counted; a --nats router refuses the flag
naming kvindex-agent.

Usage: test_sglang_ingest.py BIN_DIR
"""

import os
import subprocess
import sys
import tempfile

import grpc
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kvindex_e2e as e2e  # noqa: E402
import test_sglang_indexer as sgl  # noqa: E402  (its hand-written protobuf wire)

B = 4
MODEL = "m"
TOKENS = list(range(1, 13))
S = [h - (1 << 64) if h >= 1 << 63 else h for h in e2e.canonical(TOKENS, B)]  # as sfixed64
HBM, DRAM, SSD = 1, 2, 3
REPORT, REVOKE, CLEAR_ALL = 1, 2, 3
ADDRESS = "http://10.0.0.9:30000"


def string_field(field, text):
    data = text.encode()
    return sgl.varint(field << 3 | 2) + sgl.varint(len(data)) + data if data else b""


def action(kind, tier, hashes=()):
    body = (sgl.uint_field(1, kind) + sgl.uint_field(2, tier) +
            sgl.packed_sfixed64(3, list(hashes)))
    return sgl.varint(3 << 3 | 2) + sgl.varint(len(body)) + body


def batch(worker, seq, actions, address=ADDRESS):
    return (string_field(1, worker) + sgl.uint_field(2, seq) + b"".join(actions) +
            string_field(4, address))


def outcome_count(router, outcome):
    _, _, text = router.request("GET", "/metrics")
    prefix = ('kvindex_router_compat_requests_total{api="sglang_apply_external_kv_batch",'
              'outcome="%s"} ' % outcome)
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix):])
    return 0.0


def row_of(router, worker):
    rows = [w for w in router.match({"model": MODEL, "tokens": TOKENS})["workers"]
            if w["worker"] == worker]
    return rows[0] if rows else None


def sg0(router):
    return row_of(router, "sg0")


def w0(router):
    return row_of(router, "w0")


def main():
    bin_dir = sys.argv[1]
    # A --nats router refuses the flag, naming the agent (before any connection).
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([os.path.join(bin_dir, "kvindex-router"), "--nats",
                              "nats://127.0.0.1:4222", "--data-dir", tmp, "--sglang-indexer",
                              "127.0.0.1:0", "--sglang-ingest"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and "kvindex-agent" in out.stderr, out

    ctx = zmq.Context()
    engine = e2e.Engine(ctx)  # the model's --source (its block size)
    engines = [engine]
    port = e2e.free_port()
    router = e2e.Router(bin_dir, [engine.source("w0", MODEL, B)],
                        ["--sglang-indexer", "127.0.0.1:%d" % port, "--sglang-ingest"])
    client = None
    try:
        router.start().wait_ready()
        client = sgl.Client(port)
        apply = lambda body: client.call("ApplyExternalKvBatch", body)  # noqa: E731

        assert apply(batch("sg0", 1, [action(REPORT, HBM, S), action(REPORT, DRAM, S[:2])])) \
            == b""
        row = e2e.wait_for(lambda: sg0(router), 10, "sg0 in /v1/match")
        assert (row["longest"], row["device"], row["dp_rank"]) == (3, 3, 0), row
        prefix = sgl.decode_prefix_response(client.call(
            "MatchExternalKvPrefix", sgl.packed_sfixed64(1, S)))
        assert {"worker_address": ADDRESS, "matched_prefix_blocks": 3, "worker_id": "sg0"} in \
            prefix["matches"], prefix

        apply(batch("sg0", 2, [action(REVOKE, HBM, S[2:])]))
        e2e.wait_for(lambda: sg0(router)["longest"] == 2, 10, "S[2] revoked")

        # Refused whole, nothing applied, each counted.
        hostile = [
            (batch("sg0", 3, [action(REPORT, HBM, S)] * 257), "257 actions"),
            (batch("sg0", 3, [action(REPORT, HBM, S), action(REPORT, 0, S)]), "tier 0"),
            (batch("sg0", 3, [action(REPORT, 4, S)]), "tier 4"),
            (batch("sg0", 3, [action(0, HBM, S)]), "unknown type"),
            (batch("", 3, [action(REPORT, HBM, S)]), "worker_id"),
        ]
        for body, what in hostile:
            try:
                apply(body)
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (what, error)
            else:
                raise AssertionError("accepted: " + what)
        assert outcome_count(router, "invalid_request") == 4, outcome_count(router,
                                                                            "invalid_request")
        assert outcome_count(router, "missing_field") == 1
        # A worker_id of a --source worker: refused (it would clear w0's
        # entries through the trusted in-process log), counted, w0 untouched.
        engine.publish([engine.stored([41], TOKENS[:B], B)])
        e2e.wait_for(lambda: w0(router), 10, "w0 in /v1/match")
        try:
            apply(batch("w0", 1, [action(CLEAR_ALL, HBM)]))
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
            assert "--source" in error.details(), error.details()
        else:
            raise AssertionError("accepted: a batch for the --source worker w0")
        assert outcome_count(router, "registration_conflict") == 1
        # Both directions with an instance registered over HTTP (POST
        # /register): a worker_id naming it is refused as w0 was, and a
        # registration naming a worker the bridge feeds is refused (409):
        # either would clear the other's entries.
        registered = e2e.Engine(ctx)
        engines.append(registered)
        body = {"endpoint": "tcp://127.0.0.1:%d" % registered.pub_port,
                "replay_endpoint": "tcp://127.0.0.1:%d" % registered.replay_port,
                "type": "vLLM", "modelname": MODEL, "lora_name": "", "tenant_id": "default",
                "instance_id": "r1", "block_size": B, "dp_rank": 0, "additionalsalt": ""}
        router.json("POST", "/register", body, expect=201)
        try:
            apply(batch("r1", 1, [action(REPORT, HBM, S)]))
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
            assert "registered instance" in error.details(), error.details()
        else:
            raise AssertionError("accepted: a batch for the registered instance r1")
        assert outcome_count(router, "registration_conflict") == 2
        status, _, text = router.request("POST", "/register", dict(
            body, instance_id="sg0", endpoint="tcp://127.0.0.1:1", replay_endpoint=""))
        assert status == 409 and "SGLang bridge" in text, (status, text)
        assert "sg0" not in {w["instance_id"] for w in router.json("GET", "/workers")
                             if w["source"] == "register"}
        apply(batch("sg0", 3, []))  # a later batch lands after them: nothing else changed
        assert w0(router) is not None and w0(router)["longest"] == 1, w0(router)
        assert sg0(router)["longest"] == 2, sg0(router)

        # A gap (seq 4 lost): the worker is cleared, then the batch applied.
        apply(batch("sg0", 5, [action(REPORT, DRAM, S[:1])]))
        row = e2e.wait_for(lambda: sg0(router)["host"] == 1 and sg0(router), 10, "gap cleared")
        assert (row["longest"], row["device"]) == (1, 0), row
        apply(batch("sg0", 6, [action(CLEAR_ALL, DRAM)]))
        e2e.wait_for(lambda: sg0(router) is None, 10, "sg0 cleared")
        assert outcome_count(router, "ok") == 5, outcome_count(router, "ok")
        print("sglang ingest: report, revoke, gap, clear applied; %d bad batches refused"
              % len(hostile))
    except AssertionError:
        if router.proc is not None:
            router.proc.terminate()
            sys.stderr.write(router.logs())
        raise
    finally:
        if client is not None:
            client.channel.close()
        router.cleanup()
        for e in engines:
            e.close()
        ctx.term()


if __name__ == "__main__":
    main()
