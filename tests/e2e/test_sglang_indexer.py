#!/usr/bin/env python3
"""SGLang's KV indexer gRPC (kvindex-router --sglang-indexer; docs/compat.md)
against the simulated cluster: kvindex-mockengine's engines (every wire form,
DP ranks, host and disk tiers) publish into `kvindex-router --embedded`, and
for a sample of the trace's prompts MatchExternalKvPrefix answers what is
derived here from POST /v1/match on the same state: per worker address the
best `longest`, sorted by it descending, best_prefix_blocks, blocks_read.

The client is python3-grpcio with the protobuf wire written and read here by
hand from the field numbers of SGLang's kv_indexer.proto (package
kv_indexer.v1, service KVIndexer), not from kvindex's own .proto, so a wrong
field number or method name in ours fails this test. Hashes are our canonical
sequence hashes (xxhash, python3-xxhash) as sfixed64.

Usage: test_sglang_indexer.py BIN_DIR
"""

import os
import re
import struct
import sys

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "simulation"))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import test_simulation as sim_test  # noqa: E402
from nats_e2e import e2e  # noqa: E402

REQUESTS = 90
sim_test.REQUESTS = REQUESTS
B = sim_test.BLOCK_SIZE
MODEL = sim_test.MODELS[0]
SERVICE = "/kv_indexer.v1.KVIndexer/"


# --- protobuf wire, by hand -------------------------------------------------

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def packed_sfixed64(field, values):
    body = b"".join(struct.pack("<q", v) for v in values)
    return varint(field << 3 | 2) + varint(len(body)) + body if values else b""


def uint_field(field, value):
    return varint(field << 3 | 0) + varint(value) if value else b""


def fields(data):
    """Field number -> list of values (int for varint/fixed, bytes for
    length-delimited)."""
    out, i = {}, 0
    while i < len(data):
        key, shift = 0, 0
        while True:
            b = data[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, shift = 0, 0
            while True:
                b = data[i]
                i += 1
                value |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
        elif wire == 1:
            value = struct.unpack("<q", data[i:i + 8])[0]
            i += 8
        elif wire == 2:
            length, shift = 0, 0
            while True:
                b = data[i]
                i += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            value = data[i:i + length]
            i += length
        else:
            raise AssertionError("unexpected wire type %d" % wire)
        out.setdefault(number, []).append(value)
    return out


def unpack_sfixed64(chunks):
    values = []
    for chunk in chunks:
        values += [v for (v,) in struct.iter_unpack("<q", chunk)]
    return values


def decode_prefix_response(data):
    f = fields(data)
    matches = []
    for m in f.get(1, []):
        g = fields(m)
        matches.append({"worker_address": g.get(1, [b""])[0].decode(),
                        "matched_prefix_blocks": g.get(2, [0])[0],
                        "worker_id": g.get(3, [b""])[0].decode()})
    return {"matches": matches, "best_prefix_blocks": f.get(2, [0])[0],
            "blocks_read": f.get(3, [0])[0]}


def decode_match_response(data):
    nodes = []
    for m in fields(data).get(1, []):
        g = fields(m)
        tiers = {}
        for t in g.get(3, []):
            h = fields(t)
            tiers[h.get(1, [0])[0]] = unpack_sfixed64(h.get(2, []))
        nodes.append({"worker_id": g.get(1, [b""])[0].decode(),
                      "address": g.get(2, [b""])[0].decode(), "tiers": tiers})
    return nodes


class Client:
    def __init__(self, port):
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % port)

    def call(self, method, body):
        return self.channel.unary_unary(SERVICE + method)(body, timeout=10)

    def prefix(self, hashes, max_blocks=0):
        return decode_prefix_response(self.call(
            "MatchExternalKvPrefix", packed_sfixed64(1, hashes) + uint_field(2, max_blocks)))

    def match(self, hashes):
        return decode_match_response(self.call("MatchExternalKv", packed_sfixed64(1, hashes)))

    def code(self, method, body):
        try:
            self.call(method, body)
        except grpc.RpcError as e:
            return e.code(), e.details()
        return grpc.StatusCode.OK, ""


# --- the expected answer, from /v1/match -------------------------------------

def as_i64(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def worker_id(row):
    return row["worker"] if row["dp_rank"] == 0 else "%s:dp%d" % (row["worker"], row["dp_rank"])


def prefix_from_match(match, addresses, n):
    rows = {}
    for w in match["workers"]:  # longest desc, then worker, then rank
        address = addresses.get(w["worker"])
        if address is not None and address not in rows:
            rows[address] = {"worker_address": address, "matched_prefix_blocks": w["longest"],
                             "worker_id": worker_id(w)}
    matches = sorted(rows.values(), key=lambda r: (-r["matched_prefix_blocks"], r["worker_id"],
                                                   r["worker_address"]))
    return {"matches": matches,
            "best_prefix_blocks": matches[0]["matched_prefix_blocks"] if matches else 0,
            "blocks_read": n}


def compat_count(router, api, outcome):
    _, _, text = router.request("GET", "/metrics")
    pattern = r'kvindex_router_compat_requests_total\{api="%s",outcome="%s"\} (\S+)' % (api,
                                                                                        outcome)
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def main(bin_dir):
    requests = sim_test.read_trace(REQUESTS)
    ports = sim_test.free_ports()
    probe = sim_test.Simulator(bin_dir, [])
    sim = router = None
    try:
        fleet = sim_test.fleet(ports, ["--policy", "round-robin"])
        # Every worker gets an OpenAI endpoint (what sgl-router registers)
        # but w6 and w7, which must never appear in an answer.
        addresses, sources = {}, []
        for s in probe.sources(fleet):
            worker = re.search(r"worker=([^,]+)", s).group(1)
            s = re.sub(r",?endpoint=[^,]*", "", s)
            if worker not in ("w6", "w7"):
                port = 41000 + int(worker[1:])
                s += ",endpoint=127.0.0.1:%d" % port
                addresses[worker] = "http://127.0.0.1:%d" % port
            sources.append(s)
        sglang_port = e2e.free_port()
        router = sim_test.EmbeddedRouter(bin_dir, sources)
        router.args += ["--sglang-indexer", "127.0.0.1:%d" % sglang_port,
                        "--sglang-model", MODEL]
        router.start().wait_ready()
        sim = sim_test.Simulator(bin_dir, fleet)
        sim.start()
        sim.wait_done(120)
        truth = sim.json("GET", "/v1/truth")
        e2e.wait_for(lambda: router.state()["digest"] == truth["digest"], 60,
                     "router digest == the truth's")
        client = Client(sglang_port)

        compared = hits = unaddressed_rows = 0
        ok_before = compat_count(router, "sglang_match_external_kv_prefix", "ok")
        for r in range(REQUESTS):
            if sim_test.MODELS[r % len(sim_test.MODELS)] != MODEL:
                continue
            tokens = sim_test.prompt_tokens(requests[r])
            seq = [as_i64(h) for h in e2e.seq_hashes(e2e.local_hashes(tokens, B))]
            if not seq:
                continue
            match = router.json("POST", "/v1/match", {"model": MODEL, "tokens": tokens})
            unaddressed_rows += sum(w["worker"] not in addresses for w in match["workers"])
            got = client.prefix(seq)
            want = prefix_from_match(match, addresses, len(seq))
            assert got == want, "request %d: %s != %s" % (r, got, want)
            hits += bool(got["matches"])
            # max_blocks: the answer for the leading blocks alone.
            k = max(1, len(seq) // 2)
            short = router.json("POST", "/v1/match", {"model": MODEL, "tokens": tokens[:k * B]})
            got = client.prefix(seq, max_blocks=k)
            assert got == prefix_from_match(short, addresses, k), (r, got)
            # MatchExternalKv: every block of a row's prefix is reported held
            # by that source (any tier); its device prefix in TIER_HBM (1).
            nodes = {n["worker_id"]: n for n in client.match(seq)}
            for w in match["workers"]:
                node = nodes.get(worker_id(w))
                assert node is not None, (r, w, nodes.keys())
                held = set(sum(node["tiers"].values(), []))
                assert set(seq[:w["longest"]]) <= held, (r, w)
                assert set(seq[:w["device_prefix"]]) <= set(node["tiers"].get(1, [])), (r, w)
                assert node["address"] == addresses.get(w["worker"], ""), (r, node)
            compared += 2
        assert compared >= 20 and hits >= compared // 4, (compared, hits)
        assert unaddressed_rows > 0, "w6/w7 never matched: leaving out workers without an " \
            "address went untested"
        assert compat_count(router, "sglang_match_external_kv_prefix", "ok") - ok_before == \
            compared

        # SGLang's errors, as their service answers them, counted.
        code, details = client.code("MatchExternalKvPrefix", b"")
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "empty" in details, (code, details)
        code, _ = client.code("MatchExternalKv", packed_sfixed64(1, list(range(16385))))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, code
        assert compat_count(router, "sglang_match_external_kv", "too_many_hashes") == 1
        code, details = client.code("ApplyExternalKvBatch", b"\x0a\x01w")
        assert code == grpc.StatusCode.UNIMPLEMENTED and "--source" in details, (code, details)
        code, _ = client.code("MatchExternalKvPrefix", b"\x0a\x05\x01")  # truncated packed field
        assert code != grpc.StatusCode.OK, code
        code, _ = client.code("NoSuchMethod", b"")
        assert code == grpc.StatusCode.UNIMPLEMENTED, code
        # Still serving after the malformed ones.
        assert client.prefix([1])["blocks_read"] == 1
        assert sim.stop() == 0, sim.logs()
        print("sglang indexer: %d answers compared with /v1/match (%d with matches)" %
              (compared, hits))
    except AssertionError:
        sim_test.dump_logs(router=router, mockengine=sim)
        raise
    finally:
        for p in (sim, router):
            if p is not None:
                p.cleanup()
        probe.cleanup()


if __name__ == "__main__":
    main(sys.argv[1])
