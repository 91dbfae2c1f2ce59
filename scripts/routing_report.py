#!/usr/bin/env python3
"""The routing-quality report (scripts/routing-report.sh writes docs/results.md).

For each bundled Mooncake trace and each cluster size, runs the simulated
cluster (kvindex-mockengine) once per placement policy on the same engines:
round-robin, random and least-loaded are simulated without sockets
(`--dry-run`); kv-aware asks a real `kvindex-router --embedded`, fed by the
engines' real KV events, for every request (POST /v1/match); epp sends every
request through that router's endpoint picker (`--epp`, Envoy ext_proc) to
the picked engine's OpenAI server, the router scraping the engines'
/metrics. Writes a markdown table (hit rate per tier, prefill tokens saved,
load balance, the router exchange's latency) and a PNG plot made with
gnuplot.

Usage: routing_report.py [--bin-dir build/bin] [--out docs] [--workers 8,16,64]
                         [--traces data/mooncake/*.jsonl] [--limit N]
                         [--policies round-robin,random,least-loaded,kv-aware,epp]
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_processes import Api, Processes  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
POLICIES = ["round-robin", "random", "least-loaded", "kv-aware", "epp"]
ROUTED = ("kv-aware", "epp")  # ask a real router
MODEL = "report-model"


def engines_args(trace, workers, limit, args):
    out = ["--trace", trace, "--workers", str(workers), "--model", MODEL,
           "--block-size", "16", "--device-capacity", str(args.device_capacity),
           "--host-capacity", str(args.host_capacity), "--seed", "1",
           "--pub-base-port", str(args.port_base),
           "--replay-base-port", str(args.port_base + 200),
           "--max-running", str(args.max_running)]
    if limit:
        out += ["--limit", str(limit)]
    return out


def run_dry(bin_dir, fleet, policy, workdir):
    out = os.path.join(workdir, "report.json")
    subprocess.run([os.path.join(bin_dir, "kvindex-mockengine")] + fleet +
                   ["--policy", policy, "--dry-run", "--report-out", out, "--log-level", "warn"],
                   check=True, timeout=1800)
    with open(out) as f:
        return json.load(f)


def run_routed(bin_dir, fleet, policy, workdir, args):
    """The simulator asks a real embedded router (kv-aware: POST /v1/match;
    epp: through its endpoint picker to the engines' own HTTP servers, whose
    /metrics the router scrapes); both stopped by pid."""
    mock = os.path.join(bin_dir, "kvindex-mockengine")
    if policy == "epp":
        fleet = fleet + ["--engine-http-base-port", str(args.port_base + 400)]
    sources = subprocess.run([mock] + fleet + ["--print-sources"], check=True,
                             capture_output=True, text=True, timeout=60).stdout.split()
    router_args = ["--embedded",
                   "--data-dir", os.path.join(workdir, "router"),
                   "--http", "127.0.0.1:%d" % args.http_port, "--log-level", "warn"]
    if policy == "epp":
        router_args += ["--epp", "127.0.0.1:%d" % (args.http_port + 1), "--load-interval", "50ms"]
    for source in sources:
        router_args += ["--source", source]
    out = os.path.join(workdir, "report.json")
    procs = Processes(bin_dir, workdir, "routing-report")
    try:
        router = procs.spawn("kvindex-router", router_args)
        procs.wait_until("router ready", lambda: Api(args.http_port).ready("/readyz"), 60, router)
        ask = (["--router", "http://127.0.0.1:%d" % args.http_port] if policy == "kv-aware" else
               ["--epp", "127.0.0.1:%d" % (args.http_port + 1)])
        sim = procs.spawn("kvindex-mockengine", fleet + ["--policy", policy] + ask + [
            "--rate", str(args.rate), "--report-out", out, "--exit-when-done",
            "--start-delay", "1s", "--log-level", "warn"])
        code = sim.wait(timeout=3600)
        if code != 0:
            raise SystemExit("routing-report: kvindex-mockengine exited %d (%s)" % (code, workdir))
    finally:
        procs.stop_all()
    with open(out) as f:
        return json.load(f)


def pct(x):
    return "%.1f %%" % (100.0 * x)


def write_markdown(path, results, args, started, command, load):
    lines = [
        "# Routing quality: kv-aware placement through kvindex against blind policies",
        "",
        "Written by `%s` (%s UTC, %.0f min on this 2-core machine, shared with other" %
        (command, time.strftime("%Y-%m-%d %H:%M", time.gmtime(started)),
         (time.time() - started) / 60),
        "builds: load average %.1f at the start, %.1f at the end). Each row is one run" %
        (load[0][0], load[1][0]),
        "of the simulated cluster (`kvindex-mockengine`, services/mockengine/README.md) on a",
        "bundled Mooncake trace (data/mooncake/), all policies on the same engines:",
        "%d GPU blocks and %d CPU offload blocks per engine, block size 16, %s." %
        (args.device_capacity, args.host_capacity,
         "at most %d requests running per engine (`--max-running`), the rest queued" %
         args.max_running if args.max_running else "no limit on the requests an engine runs "
         "at once (`--max-running 0`: nothing queues)"),
        "round-robin, random and least-loaded never look at caches (simulated with",
        "`--dry-run`); kv-aware asks a real `kvindex-router --embedded`, fed by the engines'",
        "real KV events over ZMQ, `POST /v1/match` for every request (at %d requests/s)" %
        args.rate,
        "and places it by the cost in services/mockengine/README.md: the blocks left to",
        "prefill after the match (a CPU hit counts half, a disk hit a quarter) plus a price",
        "for the requests already in flight there (`--kv-load-weight` 0.25).",
        "epp sends every request through the same router's endpoint picker",
        "(`kvindex-router --embedded --epp`, docs/epp.md) exactly as a Gateway API",
        "Inference Extension gateway does (Envoy `ext_proc`: headers, the body streamed,",
        "the pick read from `x-gateway-destination-endpoint`), then to the picked",
        "engine's own OpenAI server; the router scrapes the engines' `/metrics` every",
        "50 ms and scores with its defaults (prefix 2 : KV-cache use 1 : queue 1 :",
        "in-flight 1, predict on route on).",
        "",
        "- hit rate: prompt blocks the chosen engine already held as a cached prefix (GPU,",
        "  or CPU offload loaded back), over all prompt blocks; per tier beside it.",
        "- prefill tokens saved: hit blocks x 16 tokens, and their share of all prompt tokens.",
        "- load balance: requests on the busiest worker over the mean (1.00 = even), and",
        "  the coefficient of variation of requests per worker. The traces arrive slowly",
        "  (about 3 requests/s over the simulated clock) against ~1 s of service, so few",
        "  requests are in flight at any arrival and ties (broken in turn) are common;",
        "  kv-aware keeps a conversation where its prefix is, which costs some balance.",
        "- router p50 / p99: kv-aware, the simulated gateway's whole HTTP exchange with the",
        "  router (a new connection per request); epp, the pick latency: the ext_proc",
        "  stream's start to the picker's answer carrying the pick (the body streamed",
        "  in first). Both on the shared machine, at the load above.",
        "",
        "| trace | workers | policy | hit rate | GPU | CPU | prefill tokens saved | "
        "busiest / mean | CV | router p50 / p99 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rep = r["report"]
        lat = rep["match_latency_us"]
        lines.append("| %s | %d | %s | %s | %s | %s | %s (%s) | %.2f | %.2f | %s |" % (
            r["trace"], r["workers"], r["policy"], pct(rep["hit_rate"]),
            pct(rep["hit_rate_by_tier"]["device"]), pct(rep["hit_rate_by_tier"]["host"]),
            "{:,}".format(rep["prefill_tokens_saved"]),
            pct(rep["prefill_tokens_saved"] /
                max(rep["prefill_tokens"] + rep["prefill_tokens_saved"], 1)),
            rep["load"]["max_over_mean"], rep["load"]["cv"],
            "%.0f / %.0f us" % (lat["p50"], lat["p99"]) if lat["count"] else "-"))
    epp = [r for r in results if r["policy"] == "epp"]
    if epp:
        lines += ["", "Through the endpoint picker, every run: requests the picker answered "
                  "without a pick (503/429), served by a fallback, or taken by another engine "
                  "than the one served (the router counts each served endpoint against its "
                  "pick, `kvindex_router_epp_served_total`):", ""]
        for r in epp:
            e = r["report"].get("epp", {})
            lines.append("- %s, %d workers: %d picks, %d without a pick, %d by a fallback, "
                         "%d misrouted, %d failed exchanges" % (
                             r["trace"], r["workers"], e.get("picks", 0), e.get("immediate", 0),
                             e.get("fallbacks", 0), e.get("misrouted", 0),
                             r["report"]["match_errors"]))
    lines += ["", "![hit rate per policy](results.png)", "",
              "The plot (results.png) is the hit-rate column, made by the same script with",
              "gnuplot.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def write_plot(path, results, policies):
    groups = []
    for r in results:
        key = "%s %d" % (r["trace"].replace("_trace", ""), r["workers"])
        if key not in groups:
            groups.append(key)
    rate = {(("%s %d" % (r["trace"].replace("_trace", ""), r["workers"])), r["policy"]):
            100.0 * r["report"]["hit_rate"] for r in results}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "hit.dat")
        with open(data, "w") as f:
            f.write("group " + " ".join(policies) + "\n")
            for g in groups:
                f.write('"%s" ' % g + " ".join("%.2f" % rate.get((g, p), 0) for p in policies) +
                        "\n")
        script = "\n".join([
            "set terminal pngcairo size 1000,520 font 'sans,11'",
            "set output '%s'" % path,
            "set title 'Prefix cache hit rate by placement policy (simulated cluster, "
            "Mooncake traces)'",
            "set ylabel 'prompt blocks served from cache (%)'",
            "set yrange [0:100]",
            "set style data histograms",
            "set style histogram clustered gap 1",
            "set style fill solid 0.85 border -1",
            "set key top left",
            "set grid ytics",
            "set xtics nomirror",
            "plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)" %
            (len(policies) + 1, data),
        ])
        subprocess.run(["gnuplot"], input=script, text=True, check=True, timeout=60)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--out", default=os.path.join(ROOT, "docs"))
    parser.add_argument("--workers", default="8,16,64")
    parser.add_argument("--traces", nargs="*",
                        default=sorted(glob.glob(os.path.join(ROOT, "data", "mooncake",
                                                              "*.jsonl"))))
    parser.add_argument("--limit", type=int, default=0, help="requests per trace (0 = all)")
    parser.add_argument("--rate", type=int, default=200, help="kv-aware requests/s")
    parser.add_argument("--device-capacity", type=int, default=8192)
    parser.add_argument("--host-capacity", type=int, default=32768)
    parser.add_argument("--max-running", type=int, default=0,
                        help="requests an engine runs at once, the rest queue (0 = no limit)")
    parser.add_argument("--http-port", type=int, default=18480)
    parser.add_argument("--port-base", type=int, default=27000)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--command", default="bash scripts/routing-report.sh")
    args = parser.parse_args()
    policies = args.policies.split(",")
    for policy in policies:
        if policy not in POLICIES:
            raise SystemExit("routing-report: unknown policy %r (%s)" % (policy, POLICIES))
    started = time.time()
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="kvindex-report.") as workdir:
        for trace in args.traces:
            name = os.path.splitext(os.path.basename(trace))[0]
            for workers in [int(w) for w in args.workers.split(",")]:
                fleet = engines_args(trace, workers, args.limit, args)
                for policy in policies:
                    t0 = time.monotonic()
                    run_dir = tempfile.mkdtemp(dir=workdir)
                    if policy in ROUTED:
                        report = run_routed(args.bin_dir, fleet, policy, run_dir, args)
                    else:
                        report = run_dry(args.bin_dir, fleet, policy, run_dir)
                    results.append(dict(trace=name, workers=workers, policy=policy,
                                        report=report))
                    print("%-24s %3d workers %-13s hit %s  (%.0f s)" %
                          (name, workers, policy, pct(report["hit_rate"]),
                           time.monotonic() - t0), flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_plot(os.path.join(args.out, "results.png"), results, policies)
    write_markdown(os.path.join(args.out, "results.md"), results, args, started, args.command,
                   (load_before, os.getloadavg()))
    print("routing-report: wrote %s/results.md and results.png" % args.out)


if __name__ == "__main__":
    sys.exit(main())
