#!/usr/bin/env python3
"""The simulated cluster, end to end (issue #12): kvindex-mockengine places
each request by asking a router (`--policy kv-aware`, POST /v1/match as a
gateway would), its engines publish real KV events on ZMQ, and what every
router holds at the end is checked against the engines' own ground truth.

- embedded: a mixed fleet (vLLM map and array forms, SGLang, TensorRT-LLM,
  DP ranks, two models, host and disk tiers, self-describing CPU events and
  placeholders) into `kvindex-router --embedded`: the router's digest equals
  the truth's, every source's entries per tier equal the truth's, and
  /v1/match equals the answer computed here from the truth for a sample of
  the prompts served.
- embedded_faults: the same with every fault knob on: every source no fault
  made the router clear ends exactly as the truth; a cleared source holds
  only what it stored after the clear (never a stale entry).
- nats: one kvindex-agent and two kvindex-router --nats replicas over a real
  nats-server; both end on the truth's digest and answers.
- epp: `--policy epp` through a real `kvindex-router --embedded --epp` (the
  simulator is the gateway and serves the engines' OpenAI API and /metrics):
  its hit rate beats round-robin's, every request served where it was picked.
- epp_queue: engines with `--max-running` queue a burst; their `/metrics`
  show it and the picker's queue scorer moves picks off the loaded engine.

The truth's matching is recomputed here from its block sets (semantics.md
section 5) and its digest from its entries (section 6), independently of the
simulator's C++ code.

Usage: test_simulation.py BIN_DIR SCENARIO
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))
import nats_e2e as ne  # noqa: E402
from nats_e2e import e2e  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TRACE = os.path.join(ROOT, "data", "mooncake", "conversation_trace.jsonl")
TOKENS_PER_HASH_ID = 512  # services/mockengine/prompt_tokens.h
BLOCK_SIZE = 16
MODELS = ["sim-a", "sim-b"]
REQUESTS = 360
TIER_NAMES = ("device", "host", "disk")
# The agent clears a source whose second gap comes within --replay-cooldown
# of its last replay (a bound on replay storms). The truth does not model
# that wall-clock rule, and seeded drops may fall close together.
NO_REPLAY_COOLDOWN = ["--replay-cooldown", "0s"]
ROW_KEYS = ("worker", "dp_rank", "longest", "device", "host", "disk", "external",
            "device_prefix")


# --- the trace's prompts, as the simulator builds them ----------------------------

def _mix64(z):
    mask = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def prompt_tokens(request):
    tokens = [_mix64(i * TOKENS_PER_HASH_ID + j) % 128000 + 1
              for i in request["hash_ids"] for j in range(TOKENS_PER_HASH_ID)]
    length = request.get("input_length", 0)
    return tokens[:length] if 0 < length < len(tokens) else tokens


def read_trace(limit):
    with open(TRACE) as f:
        return [json.loads(line) for _, line in zip(range(limit), f)]


# --- the truth --------------------------------------------------------------------

def truth_digest(truth, view=None):
    """Section 6 over the truth's entries (view "stored_since_clear": over
    what the index may hold)."""
    return e2e.digest((s["model"], s["worker"], s["dp_rank"], tier, block)
                      for s in truth["sources"] for tier in TIER_NAMES
                      for block in (s[view] if view else s)[tier])


def truth_rows(truth, model, tokens, allowed=False):
    """Semantics section 5 over the truth's block sets; with `allowed`, over
    what each source may hold (its `stored_since_clear`)."""
    seq = e2e.canonical(tokens, BLOCK_SIZE)
    rows = []
    for source in truth["sources"]:
        if source["model"] != model:
            continue
        held = source["stored_since_clear"] if allowed else source
        sets = [set(held[tier]) for tier in TIER_NAMES]
        row = dict(worker=source["worker"], dp_rank=source["dp_rank"], longest=0, device=0,
                   host=0, disk=0, external=0, device_prefix=0)
        on_device_so_far = True
        for block in seq:
            tier = next((t for t, s in zip(TIER_NAMES, sets) if block in s), None)
            if tier is None:
                break
            row["longest"] += 1
            row[tier] += 1
            on_device_so_far = on_device_so_far and tier == "device"
            if on_device_so_far:
                row["device_prefix"] += 1
        if row["longest"]:
            rows.append(row)
    rows.sort(key=lambda r: (-r["longest"], r["worker"], r["dp_rank"]))
    return rows


def project(rows):
    return [tuple(row[k] for k in ROW_KEYS) for row in rows]


# --- processes ------------------------------------------------------------------

class Simulator(ne.Process):
    """kvindex-mockengine with its truth HTTP endpoint on a free port."""

    request = e2e.Router.request
    json = e2e.Router.json
    token = None

    def __init__(self, bin_dir, args):
        self.port = e2e.free_port()
        self.bin = os.path.join(bin_dir, "kvindex-mockengine")
        super().__init__([self.bin, "--truth-http", "127.0.0.1:%d" % self.port,
                          "--log-level", "info"] + args)

    def sources(self, args):
        """The router --source strings for this fleet (--print-sources)."""
        out = subprocess.run([self.bin] + args + ["--print-sources"], check=True,
                             capture_output=True, text=True, timeout=30).stdout
        return [line for line in out.splitlines() if line.strip()]

    def wait_done(self, timeout):
        def done():
            if self.proc.poll() is not None:
                raise AssertionError("mockengine exited with %s: %s" %
                                     (self.proc.returncode, self.logs()))
            progress = self.json("GET", "/v1/progress")
            return progress if progress["requests_done"] == progress["requests_total"] else None
        return e2e.wait_for(done, timeout, "the simulation to serve every request")


class EmbeddedRouter(ne.NatsRouter):
    """kvindex-router --embedded with its logs in files (fault runs log a lot)."""

    def __init__(self, bin_dir, sources):
        super().__init__(bin_dir, "unused")
        self.args = [self.bin, "--embedded", "--data-dir", self.data_dir, "--http",
                     "127.0.0.1:%d" % self.port, "--node", "sim-node", "--replay-timeout", "2s",
                     "--log-level", "info"] + NO_REPLAY_COOLDOWN
        for source in sources:
            self.args += ["--source", source]


def fleet(ports, extra=()):
    """Eight workers, every wire form, two models, DP ranks, three tiers."""
    pub, replay = ports
    args = ["--trace", TRACE, "--limit", str(REQUESTS), "--workers", "8",
            "--pub-base-port", str(pub), "--replay-base-port", str(replay),
            "--block-size", str(BLOCK_SIZE), "--device-capacity", "1500",
            "--host-capacity", "1500", "--disk-capacity", "3000", "--seed", "12",
            "--engine", "index=1,wire=vllm-array",
            "--engine", "index=2,wire=sglang,disk=0",
            "--engine", "index=3,wire=trtllm,dp_ranks=2",
            "--engine", "index=4,cpu_events=tokens,speed=2",
            "--engine", "index=5,wire=sglang,dp_ranks=2,host=600,disk=0",
            "--engine", "index=6,wire=vllm-array,device=600,cpu_events=tokens",
            "--rate", "150", "--start-delay", "1s"]
    for model in MODELS:
        args += ["--model", model]
    return args + list(extra)


def free_ports(count=12):
    """(pub base, replay base): 2 x `count` consecutive free loopback ports
    (the simulator binds base + k for its k-th (worker, rank)), below the
    kernel's ephemeral range: a router connecting before the simulator binds
    retries from ephemeral ports, which must not take the ones we hand out."""
    low, _ = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(10000, max(low, 10000 + 4 * count) - 2 * count)
        sockets = []
        try:
            for port in range(base, base + 2 * count):
                sockets.append(socket.socket())
                sockets[-1].bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
        return base, base + count
    raise AssertionError("no block of %d free ports" % (2 * count))


# --- checks ---------------------------------------------------------------------

def check_prompt_tokens(bin_dir, requests):
    """This file's prompt builder equals the simulator's (--print-prompt)."""
    for r in (0, len(requests) - 1):
        out = subprocess.run([os.path.join(bin_dir, "kvindex-mockengine"), "--trace", TRACE,
                              "--print-prompt", str(r)], check=True, capture_output=True,
                             text=True, timeout=30).stdout
        assert json.loads(out) == prompt_tokens(requests[r]), "prompt %d differs" % r


def workers_by_source(router):
    return {(w["model"], w["worker"], w["dp_rank"]): w["entries"]
            for w in router.json("GET", "/v1/workers")["workers"]}


def check_router(router, truth, requests):
    """Per-source entries and /v1/match of sampled prompts against what
    semantics.md lets the router hold: the truth for every source no fault
    made it clear, and for a cleared source what it stored after the clear
    (its `stored_since_clear`, equal to the truth when it was never cleared)."""
    held = workers_by_source(router)
    for s in truth["sources"]:
        key = (s["model"], s["worker"], s["dp_rank"])
        got = held.get(key, {t: 0 for t in TIER_NAMES})
        for tier in TIER_NAMES:
            allowed = len(s["stored_since_clear"][tier])
            assert got[tier] == allowed, "%s %s: router holds %d, the truth allows %d%s" % (
                key, tier, got[tier], allowed, " (cleared by a fault)" if s["cleared_by_fault"]
                else "")
            if not s["cleared_by_fault"]:
                assert allowed == s["entries"][tier] == len(s[tier]), (key, tier)
    compared = 0
    for r in range(0, len(requests), max(1, len(requests) // 60)):
        model = MODELS[r % len(MODELS)]
        tokens = prompt_tokens(requests[r])
        answer = router.json("POST", "/v1/match", {"model": model, "tokens": tokens})
        expected = truth_rows(truth, model, tokens, allowed=True)
        assert project(answer["workers"]) == project(expected), (
            "request %d: router %s != truth %s" % (r, answer["workers"], expected))
        compared += 1
    return compared


def check_truth_endpoint(sim, truth, requests):
    """The simulator's own /v1/match (its reference answer) agrees with the
    truth recomputed here, and its digest with section 6."""
    assert truth["digest"] == truth_digest(truth), "truth digest %s != recomputed %s" % (
        truth["digest"], truth_digest(truth))
    allowed = truth_digest(truth, "stored_since_clear")
    assert truth["stored_since_clear_digest"] == allowed, (truth["stored_since_clear_digest"],
                                                           allowed)
    for r in range(0, len(requests), max(1, len(requests) // 10)):
        model = MODELS[r % len(MODELS)]
        tokens = prompt_tokens(requests[r])
        body = {"model": model, "tokens": tokens}
        answer = sim.json("POST", "/v1/match", body)
        assert project(answer["workers"]) == project(truth_rows(truth, model, tokens)), r
        answer = sim.json("POST", "/v1/match?view=index", body)
        assert project(answer["workers"]) == project(truth_rows(truth, model, tokens, True)), r


def run_embedded(bin_dir, faults):
    requests = read_trace(REQUESTS)
    check_prompt_tokens(bin_dir, requests)
    ports = free_ports()
    extra = ["--policy", "kv-aware"]
    if faults:
        extra += ["--fault-drop", "4", "--fault-gap", "1", "--fault-restart", "1",
                  "--fault-malformed", "1", "--fault-slow", "1"]
    sim = router = None
    probe = Simulator(bin_dir, [])
    try:
        sources = probe.sources(fleet(ports))
        assert len(sources) == 8, sources
        router = EmbeddedRouter(bin_dir, sources).start().wait_ready()
        report = os.path.join(probe.dir, "report.json")
        sim = Simulator(bin_dir, fleet(ports, extra + [
            "--router", "http://127.0.0.1:%d" % router.port, "--report-out", report,
            "--truth-out", os.path.join(probe.dir, "truth.json"),
            "--requests-out", os.path.join(probe.dir, "requests.jsonl")]))
        sim.start()
        progress = sim.wait_done(120)
        assert progress["report"]["match_errors"] == 0, progress["report"]
        assert progress["report"]["match_latency_us"]["count"] == REQUESTS, progress["report"]
        truth = sim.json("GET", "/v1/truth")
        assert truth["requests_done"] == REQUESTS
        check_truth_endpoint(sim, truth, requests)
        sources_held = [s for s in truth["sources"] if any(s[t] for t in TIER_NAMES)]
        assert len(sources_held) >= 8, "too few sources hold blocks: %d" % len(sources_held)
        for tier in TIER_NAMES:
            assert any(s[tier] for s in truth["sources"]), "no source holds blocks on " + tier
        # Exact in both runs: with faults, the digest of what the cleared
        # sources stored since their clear and the rest of the truth.
        want = truth["stored_since_clear_digest"]
        if not faults:
            assert want == truth["digest"], truth["digest"]
        e2e.wait_for(lambda: router.state()["digest"] == want, 60,
                     "router digest == the truth's %s" % want)
        if faults:
            injected = progress["report"]["faults"]
            for kind, want in (("drop", 4), ("gap", 1), ("restart", 1), ("malformed", 1),
                               ("slow", 1)):
                assert injected[kind] == want, injected
            cleared = [s for s in truth["sources"] if s["cleared_by_fault"]]
            assert cleared and len(cleared) < len(truth["sources"]), (
                "faults should clear some sources, not all: %d" % len(cleared))
        compared = check_router(router, truth, requests)
        assert sim.stop() == 0, sim.logs()
        with open(report) as f:
            final = json.load(f)
        assert final["requests"] == REQUESTS and final["policy"] == "kv-aware", final
        with open(os.path.join(probe.dir, "requests.jsonl")) as f:
            placed = [json.loads(line) for line in f if line.strip()]
        assert [p["request"] for p in placed] == list(range(REQUESTS))
        for tier in TIER_NAMES:
            assert sum(p[tier] for p in placed) == final["hit_blocks"][tier], tier
        assert all(p["match_us"] is not None for p in placed)
        print("embedded%s: %d sources, %d prompts compared, digest %s, hit rate %.3f" %
              (" with faults" if faults else "", len(truth["sources"]), compared,
               router.state()["digest"], final["hit_rate"]))
    except AssertionError:
        dump_logs(router=router, mockengine=sim)
        raise
    finally:
        for p in (sim, router):
            if p is not None:
                p.cleanup()
        probe.cleanup()


def dump_logs(**procs):
    """The tail of each process's log, for a failed check."""
    for name, proc in procs.items():
        if proc is not None and proc.proc is not None:
            print("--- %s log (last 40 lines)" % name)
            print("\n".join(proc.logs().splitlines()[-40:]))


def scenario_embedded(bin_dir):
    run_embedded(bin_dir, faults=False)


def scenario_embedded_faults(bin_dir):
    run_embedded(bin_dir, faults=True)


def scenario_nats(bin_dir):
    """One agent, two routers over a real nats-server, routing kv-aware
    through the first; both end on the truth."""
    requests = read_trace(REQUESTS)
    ports = free_ports()
    server = ne.NatsServer().start()
    agent = sim = None
    routers = []
    probe = Simulator(bin_dir, [])
    try:
        sources = probe.sources(fleet(ports))
        # --models: a model is known before its first event, so the first
        # requests of each model match nothing instead of answering 404.
        routers = [ne.NatsRouter(bin_dir, server.url, extra=["--models", ",".join(MODELS)]).start()
                   for _ in range(2)]
        for router in routers:
            router.wait_ready()
        agent = ne.Agent(bin_dir, server.url, "sim-agent", sources,
                         extra=NO_REPLAY_COOLDOWN).start()
        sim = Simulator(bin_dir, fleet(ports, ["--policy", "kv-aware", "--router",
                                               "http://127.0.0.1:%d" % routers[0].port]))
        sim.start()
        progress = sim.wait_done(120)
        assert progress["report"]["match_errors"] == 0, progress["report"]
        truth = sim.json("GET", "/v1/truth")
        check_truth_endpoint(sim, truth, requests)
        ne.same_digest(routers, truth["digest"], timeout=60)
        for router in routers:
            check_router(router, truth, requests)
        assert sim.stop() == 0, sim.logs()
        print("nats: 2 routers on digest %s" % truth["digest"])
    except AssertionError:
        dump_logs(mockengine=sim, agent=agent, router0=routers[0] if routers else None)
        raise
    finally:
        for p in [sim, agent] + routers:
            if p is not None:
                p.cleanup()
        probe.cleanup()
        server.cleanup()


def cleanup(probe, *procs):
    """Stops the processes (by pid) and removes the probe's directory."""
    for p in procs:
        if p is not None:
            p.cleanup()
    probe.cleanup()


def engine_metrics(port):
    """A simulated engine's /metrics text."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as answer:
        return answer.read().decode()


def metric_samples(text, name):
    """{labels text: value} of one metric in a Prometheus exposition."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            out[key[len(name):]] = float(value)
    return out


def scenario_epp(bin_dir):
    """kvindex-mockengine --policy epp: every request goes through a real
    `kvindex-router --embedded --epp` as a GAIE gateway sends it (ext_proc,
    the pick in the header and envoy.lb metadata), then to the picked
    engine's own OpenAI server; the router scrapes the engines' /metrics.
    On a prefix-sharing trace the picker's placement beats round-robin's hit
    rate, and every request was served by the engine the router picked: the
    router counts each served endpoint (x-gateway-destination-endpoint-served,
    the address the gateway connected to) against its pick, and the engines
    count what reached them."""
    requests, workers = 300, 8  # the routing report's smallest fleet (docs/results.md)
    ports = free_ports(workers)
    engine_base = free_ports(workers)[0]
    trace = os.path.join(ROOT, "data", "mooncake", "synthetic_trace.jsonl")
    fleet_args = ["--trace", trace, "--limit", str(requests), "--workers", str(workers),
                  "--pub-base-port", str(ports[0]), "--replay-base-port", str(ports[1]),
                  "--engine-http-base-port", str(engine_base), "--block-size", str(BLOCK_SIZE),
                  "--device-capacity", "4096", "--host-capacity", "8192", "--seed", "3",
                  "--model", "sim-epp", "--rate", "150", "--start-delay", "1s"]
    sim = router = None
    probe = Simulator(bin_dir, [])
    try:
        blind = os.path.join(probe.dir, "round-robin.json")
        subprocess.run([probe.bin] + fleet_args + ["--policy", "round-robin", "--dry-run",
                                                   "--report-out", blind, "--log-level", "warn"],
                       check=True, timeout=60)
        with open(blind) as f:
            round_robin = json.load(f)
        sources = probe.sources(fleet_args)
        assert all(",endpoint=127.0.0.1:%d" % (engine_base + i) in s
                   for i, s in enumerate(sources)), sources
        router = EmbeddedRouter(bin_dir, sources)
        epp_port = e2e.free_port()
        router.args += ["--epp", "127.0.0.1:%d" % epp_port, "--load-interval", "50ms"]
        router.start().wait_ready()
        report = os.path.join(probe.dir, "report.json")
        sim = Simulator(bin_dir, fleet_args + [
            "--policy", "epp", "--epp", "127.0.0.1:%d" % epp_port, "--report-out", report,
            "--truth-out", os.path.join(probe.dir, "truth.json")])
        sim.start()
        progress = sim.wait_done(120)
        rep = progress["report"]
        assert rep["policy"] == "epp", rep
        assert rep["match_errors"] == 0, rep
        assert rep["epp"] == {"picks": requests, "immediate": 0, "fallbacks": 0,
                              "misrouted": 0}, rep["epp"]
        assert rep["match_latency_us"]["count"] == requests, rep
        # The router's view: every stream's served endpoint was its pick.
        metrics = router.request("GET", "/metrics")[2]
        served = metric_samples(metrics, "kvindex_router_epp_served_total")
        assert served.get('{result="pick"}') == requests and not served.get(
            '{result="other"}') and not served.get('{result="fallback"}'), served
        picks = metric_samples(metrics, "kvindex_router_epp_picks_total")
        # Load-only: a request before the index has seen the model's first event
        # (the first 0.1 s at 150 requests/s, on a loaded machine).
        assert sum(picks.values()) == requests and picks['{kind="prefix"}'] >= requests - 15, picks
        scrapes = metric_samples(metrics, "kvindex_router_load_scrapes_total")
        assert scrapes.get('{outcome="ok"}', 0) > 0, scrapes
        # The engines' view: each served what the report placed on it.
        per_worker = []
        for i in range(workers):
            text = engine_metrics(engine_base + i)
            per_worker.append(int(metric_samples(text, "vllm:request_success_total")[
                '{model_name="sim-epp"}']))
            assert "vllm:kv_cache_usage_perc" in text and "vllm:num_requests_waiting" in text
        assert per_worker == rep["load"]["requests_per_worker"], (per_worker, rep["load"])
        assert sum(per_worker) == requests
        truth = sim.json("GET", "/v1/truth")
        e2e.wait_for(lambda: router.state()["digest"] == truth["digest"], 60,
                     "router digest == the truth's %s" % truth["digest"])
        assert rep["hit_rate"] > 1.5 * round_robin["hit_rate"], (
            "epp hit rate %.3f does not beat round-robin's %.3f" % (rep["hit_rate"],
                                                                 round_robin["hit_rate"]))
        assert sim.stop() == 0, sim.logs()
        print("epp: hit rate %.3f against round-robin %.3f; %s requests per worker; pick "
              "p50 %.0f us, p99 %.0f us" % (rep["hit_rate"], round_robin["hit_rate"], per_worker,
                                            rep["match_latency_us"]["p50"],
                                            rep["match_latency_us"]["p99"]))
    except AssertionError:
        dump_logs(router=router, mockengine=sim)
        raise
    finally:
        cleanup(probe, sim, router)


def scenario_epp_queue(bin_dir):
    """The engines queue (`--max-running 2`) and the picker sees it: a burst
    of requests that share the first 2 of their 5 prompt blocks (each needs
    2 s of service, one every 100 ms) piles up on the first engine that
    holds the shared prefix; its `/metrics` shows requests waiting, and the
    router's queue scorer, fed by its scrapes, moves later picks to the
    other engines (with the engines' waiting gauge forced to 0 every request
    stays with the prefix: prefix 2 x 0.4 beats KV-cache use, which differs
    by a few percent)."""
    requests, workers = 30, 4
    ports = free_ports(workers)
    engine_base = free_ports(workers)[0]
    sim = router = None
    probe = Simulator(bin_dir, [])
    try:
        trace = os.path.join(probe.dir, "burst.jsonl")
        with open(trace, "w") as f:
            for r in range(requests):
                f.write(json.dumps({"timestamp": 100 * r, "input_length": 5 * TOKENS_PER_HASH_ID,
                                    "output_length": 1000,
                                    "hash_ids": [0, 1] + [1000 + 3 * r + i for i in range(3)]})
                        + "\n")
        fleet_args = ["--trace", trace, "--workers", str(workers), "--pub-base-port",
                      str(ports[0]), "--replay-base-port", str(ports[1]),
                      "--engine-http-base-port", str(engine_base), "--block-size",
                      str(BLOCK_SIZE), "--max-running", "2", "--seed", "5", "--model", "sim-q",
                      "--rate", "10", "--start-delay", "1s"]
        router = EmbeddedRouter(bin_dir, probe.sources(fleet_args))
        epp_port = e2e.free_port()
        router.args += ["--epp", "127.0.0.1:%d" % epp_port, "--load-interval", "50ms"]
        router.start().wait_ready()
        report = os.path.join(probe.dir, "report.json")
        sim = Simulator(bin_dir, fleet_args + [
            "--policy", "epp", "--epp", "127.0.0.1:%d" % epp_port, "--report-out", report])
        sim.start()
        rep = sim.wait_done(60)["report"]
        assert rep["epp"]["picks"] == requests and rep["match_errors"] == 0, rep
        assert rep["load"]["max_waiting"] > 0, rep["load"]
        # The engines' gauges after the burst (they hold until the next arrival).
        waiting = []
        for i in range(workers):
            text = engine_metrics(engine_base + i)
            label = '{model_name="sim-q"}'
            waiting.append(metric_samples(text, "vllm:num_requests_waiting")[label])
            running = metric_samples(text, "vllm:num_requests_running")[label]
            assert running <= 2, text
        assert max(waiting) > 0, ("no engine shows a queue", waiting)
        samples = metric_samples(router.request("GET", "/metrics")[2],
                                 "kvindex_router_epp_load_samples_total")
        assert samples.get('{outcome="received"}', 0) > 0, samples
        per_worker = rep["load"]["requests_per_worker"]
        # The queue scorer spreads the burst: no engine takes half of it.
        assert max(per_worker) <= requests // 2 and sum(1 for n in per_worker if n) >= 3, (
            "picks did not move away from the loaded engine", per_worker, waiting)
        assert sim.stop() == 0, sim.logs()
        print("epp_queue: requests per worker %s, waiting at the end %s, longest queue %d, "
              "mean wait %.0f ms" % (per_worker, waiting, rep["load"]["max_waiting"],
                                     rep["load"]["wait_us"]["mean"] / 1000))
    except AssertionError:
        dump_logs(router=router, mockengine=sim)
        raise
    finally:
        cleanup(probe, sim, router)


def scenario_quickstart(bin_dir):
    """The README's quick start as CI runs it (CI=true, no terminal): it
    finishes by itself, exit 0, with its tables and the lines to try."""
    pub, replay = free_ports(20)
    env = dict(os.environ, CI="true", KVINDEX_DEMO_REQUESTS="300", KVINDEX_DEMO_WORKERS="4",
               KVINDEX_DEMO_RATE="200", KVINDEX_DEMO_PORT=str(e2e.free_port()),
               KVINDEX_DEMO_TRUTH_PORT=str(e2e.free_port()), KVINDEX_DEMO_PUB_BASE=str(pub),
               KVINDEX_DEMO_REPLAY_BASE=str(replay))
    demo = subprocess.Popen([sys.executable, os.path.join(ROOT, "scripts", "demo_cluster.py"),
                             "--bin-dir", bin_dir], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = demo.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        # SIGTERM: the demo stops its router and simulator by pid, then exits.
        demo.terminate()
        stdout, stderr = demo.communicate(timeout=60)
        raise AssertionError("quick start did not finish within 180 s:\n%s\n%s" % (stdout, stderr))
    assert demo.returncode == 0, "quick start exited %d:\n%s\n%s" % (demo.returncode, stdout,
                                                                      stderr)
    for expected in ("Progress:", "Index:", "Routing:", "Match of a recent prompt",
                     "equals the engines' own", "kvindex-ctl match --router",
                     "curl -s -X POST", "demo: done"):
        assert expected in stdout, "quick start output lacks %r:\n%s" % (expected, stdout)
    print(stdout[-2000:])


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    ne.run_scenario(globals(), sys.argv)
