#!/usr/bin/env python3
"""The compatibility APIs (docs/compat.md) against the simulated cluster:
kvindex-mockengine's engines (every wire form, DP ranks, two models, host and
disk tiers) publish into `kvindex-router --embedded`, and for a sample of the
trace's prompts the answers of Mooncake's POST /query and /query_by_hash and
Dynamo's POST /query_tiered_by_hash equal the ones derived here from
POST /v1/match on the same state. Hashes are computed here with xxhash
(Debian python3-xxhash) from Dynamo's documented scheme, independently of the
router's C++; Dynamo hashes go on the wire as i64 as Dynamo sends them.
Most workers are named by a decimal Dynamo WorkerId; the two that are not
are left out of Dynamo answers and counted.

Usage: test_compat.py BIN_DIR
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "simulation"))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import test_simulation as sim_test  # noqa: E402
from nats_e2e import e2e  # noqa: E402

REQUESTS = 120
sim_test.REQUESTS = REQUESTS
B = sim_test.BLOCK_SIZE


def as_i64(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def mooncake_from_match(match, instance=None):
    out = {}
    for w in match["workers"]:
        if instance is not None and w["worker"] != instance:
            continue
        inst = out.setdefault(w["worker"], {"longest_matched": 0, "GPU": 0, "CPU": 0, "DISK": 0,
                                            "DP": {}})
        figures = {"longest_matched": w["longest"], "GPU": w["device"],
                   "CPU": w["device"] + w["host"], "DISK": w["device"] + w["host"] + w["disk"]}
        for key, blocks in figures.items():
            inst[key] = max(inst[key], blocks * B)
        inst["DP"][str(w["dp_rank"])] = w["longest"] * B
    return {"default": out}


def dynamo_from_match(match):
    scores, host, disk, external, freq = [], [], [], [], []
    for w in match["workers"]:
        if not w["worker"].isdigit():
            continue
        wid = {"worker_id": int(w["worker"]), "dp_rank": w["dp_rank"]}
        if w["device_prefix"]:
            scores.append([wid, w["device_prefix"]])
        for rows, key in ((host, "host"), (disk, "disk"), (external, "external")):
            if w[key]:
                rows.append([wid, w[key]])
        freq += [0] * (w["device_prefix"] - len(freq))
        for i in range(w["device_prefix"]):
            freq[i] += 1
    return {"block_size": B, "tiered": {
        "device": {"scores": scores, "frequencies": freq},
        "lower_tier": [["host_pinned", {"hits": host}], ["disk", {"hits": disk}],
                       ["external", {"hits": external}]]}}


def omitted(router):
    _, _, text = router.request("GET", "/metrics")
    for line in text.splitlines():
        if line.startswith("kvindex_router_compat_workers_omitted_total"):
            return float(line.split()[-1])
    return 0.0


def main(bin_dir):
    requests = sim_test.read_trace(REQUESTS)
    ports = sim_test.free_ports()
    probe = sim_test.Simulator(bin_dir, [])
    sim = router = None
    try:
        fleet = sim_test.fleet(ports, ["--policy", "round-robin"])
        sources = probe.sources(fleet)
        # Dynamo WorkerIds for w0..w5; w6 and w7 keep names Dynamo cannot carry.
        renamed = []
        for s in sources:
            for i in range(6):
                s = s.replace("worker=w%d," % i, "worker=%d," % (1000 + i))
            renamed.append(s)
        router = sim_test.EmbeddedRouter(bin_dir, renamed).start().wait_ready()
        sim = sim_test.Simulator(bin_dir, fleet)
        sim.start()
        sim.wait_done(120)
        truth = sim.json("GET", "/v1/truth")
        # Renamed workers change the digest (section 6 keys on names): the
        # router has caught up when it holds the truth's entries per tier.
        want_entries = {t: sum(s["entries"][t] for s in truth["sources"])
                        for t in sim_test.TIER_NAMES}
        e2e.wait_for(lambda: all(router.state()["entries"][t] == n
                                 for t, n in want_entries.items()), 60,
                     "router entries == the truth's %s" % want_entries)
        compared = hits = 0
        before = omitted(router)
        non_numeric_rows = 0
        for r in range(0, REQUESTS, 3):
            model = sim_test.MODELS[r % len(sim_test.MODELS)]
            tokens = sim_test.prompt_tokens(requests[r])
            local = e2e.local_hashes(tokens, B)
            seq = e2e.seq_hashes(local)
            match = router.json("POST", "/v1/match", {"model": model, "tokens": tokens})
            hits += bool(match["workers"])
            non_numeric_rows += sum(not w["worker"].isdigit() for w in match["workers"])
            want = mooncake_from_match(match)
            got = router.json("POST", "/query", {"model": model, "token_ids": tokens,
                                                 "block_size": B, "tenant_id": "default"})
            assert got == want, "request %d /query: %s != %s" % (r, got, want)
            got = router.json("POST", "/query_by_hash", {"model": model, "seq_hashes": seq,
                                                         "block_size": B})
            assert got == want, "request %d /query_by_hash: %s != %s" % (r, got, want)
            if match["workers"]:
                instance = match["workers"][-1]["worker"]
                got = router.json("POST", "/query", {"model": model, "token_ids": tokens,
                                                     "instance_id": instance})
                assert got == mooncake_from_match(match, instance), r
            got = router.json("POST", "/query_tiered_by_hash", {
                "block_hashes": [as_i64(h) for h in local], "model_name": model,
                "routing_group": ""})
            want = dynamo_from_match(match)
            assert got == want, "request %d /query_tiered_by_hash: %s != %s" % (r, got, want)
            compared += 1
        assert hits >= compared // 2, "too few prompts hit a cache: %d of %d" % (hits, compared)
        assert non_numeric_rows > 0, "no w6/w7 rows: the omission went untested"
        assert omitted(router) - before == non_numeric_rows, (omitted(router), before,
                                                              non_numeric_rows)
        workers = router.json("GET", "/workers")
        assert {w["instance_id"] for w in workers} == \
            {"%d" % (1000 + i) for i in range(6)} | {"w6", "w7"}, workers
        # An instance named by --source cannot be registered over HTTP
        # (test_register.py covers registration itself).
        status, _, body = router.request("POST", "/register", {
            "endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "modelname": "sim-a",
            "instance_id": "1000", "block_size": B, "dp_rank": 0})
        assert status == 409 and "--source" in body, (status, body)
        assert sim.stop() == 0, sim.logs()
        print("compat: %d prompts compared (%d with hits) on /query, /query_by_hash, "
              "/query_tiered_by_hash" % (compared, hits))
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
