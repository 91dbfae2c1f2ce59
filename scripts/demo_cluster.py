#!/usr/bin/env python3
"""The quick start's live view (README, `bash scripts/demo.sh`).

Starts a simulated cluster that routes with kvindex: `kvindex-mockengine`
plays N vLLM engines serving the Mooncake conversation trace and places each
request by asking `kvindex-router --embedded` (POST /v1/match, kv-aware);
the engines publish their real KV events, which the router indexes. One
refreshing screen shows progress, the index, routing quality against
round-robin on the same trace, and a live match; at the end the router's
digest is checked against the engines' ground truth, and the API stays up
with commands to try.

Under CI (`CI=true`) or without a terminal it prints plain periodic lines
and exits 0 when the run is done. Process logs go to files in the run
directory, never between the tables.

Usage: demo_cluster.py [--bin-dir build/bin] (the rest from KVINDEX_DEMO_* env)
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_processes import Api, Processes  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MODEL = "demo-model"
BLOCK_SIZE = 16


def env_int(name, default):
    return int(os.environ.get(name, default))


def percent(x):
    return "%5.1f %%" % (100.0 * x)


def table(caption, header, rows):
    """A caption line, then aligned columns."""
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  " + caption]
    for i, row in enumerate(cells):
        lines.append("    " + "  ".join(c.rjust(w) if j else c.ljust(w)
                                         for j, (c, w) in enumerate(zip(row, widths))))
        if i == 0:
            lines.append("    " + "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Demo:
    def __init__(self, args):
        self.bin = args.bin_dir
        self.trace = os.environ.get("KVINDEX_TRACE",
                                    os.path.join(ROOT, "data", "mooncake",
                                                 "conversation_trace.jsonl"))
        self.requests = env_int("KVINDEX_DEMO_REQUESTS", 3000)
        self.workers = env_int("KVINDEX_DEMO_WORKERS", 8)
        self.rate = env_int("KVINDEX_DEMO_RATE", 150)
        self.device_capacity = env_int("KVINDEX_DEMO_DEVICE_BLOCKS", 8192)
        self.host_capacity = env_int("KVINDEX_DEMO_HOST_BLOCKS", 32768)
        self.http_port = env_int("KVINDEX_DEMO_PORT", 8080)
        self.truth_port = env_int("KVINDEX_DEMO_TRUTH_PORT", 8090)
        self.pub_base = env_int("KVINDEX_DEMO_PUB_BASE", 25557)
        self.replay_base = env_int("KVINDEX_DEMO_REPLAY_BASE", self.pub_base + 100)
        self.interactive = (sys.stdout.isatty() and os.environ.get("CI", "") in ("", "0", "false")
                            and os.environ.get("KVINDEX_DEMO_KEEP", "1") != "0")
        self.dir = tempfile.mkdtemp(prefix="kvindex-demo.")
        self.procs = Processes(self.bin, self.dir, "demo")
        self.router = Api(self.http_port)
        self.truth = Api(self.truth_port)
        self.started = time.monotonic()
        self.last_events = (0, self.started)

    def fleet(self):
        """The simulated engines, the same for the kv-aware run and the
        round-robin baseline."""
        return ["--trace", self.trace, "--limit", str(self.requests), "--workers",
                str(self.workers), "--model", MODEL, "--block-size", str(BLOCK_SIZE),
                "--device-capacity", str(self.device_capacity),
                "--host-capacity", str(self.host_capacity),
                "--pub-base-port", str(self.pub_base),
                "--replay-base-port", str(self.replay_base), "--seed", "1"]

    # --- the run ----------------------------------------------------------------

    def baseline(self):
        """Round-robin on the same trace and fleet, simulated without sockets."""
        out = os.path.join(self.dir, "round-robin.json")
        subprocess.run([self.procs.tool("kvindex-mockengine")] + self.fleet() +
                       ["--policy", "round-robin", "--dry-run", "--report-out", out,
                        "--log-level", "warn"], check=True, timeout=300)
        with open(out) as f:
            return json.load(f)

    def start(self):
        sources = subprocess.run([self.procs.tool("kvindex-mockengine")] + self.fleet() +
                                 ["--print-sources"], check=True, capture_output=True,
                                 text=True, timeout=30).stdout.split()
        router_args = ["--embedded", "--data-dir", os.path.join(self.dir, "router-data"),
                       "--http", "127.0.0.1:%d" % self.http_port]
        for source in sources:
            router_args += ["--source", source]
        router = self.procs.spawn("kvindex-router", router_args)
        self.procs.wait_until("the router's /readyz", lambda: self.router.ready("/readyz"), 60, router)
        sim = self.procs.spawn("kvindex-mockengine", self.fleet() + [
            "--policy", "kv-aware", "--router", "http://127.0.0.1:%d" % self.http_port,
            "--rate", str(self.rate), "--truth-http", "127.0.0.1:%d" % self.truth_port,
            "--report-out", os.path.join(self.dir, "kv-aware.json"),
            "--truth-out", os.path.join(self.dir, "truth.json"), "--start-delay", "1s"])
        self.procs.wait_until("the simulator's /healthz", lambda: self.truth.ready("/healthz"), 30, sim)
        return sim

    def snapshot(self):
        progress = self.truth.call("GET", "/v1/progress")
        state = self.router.call("GET", "/v1/state")
        return progress, state

    def sample_prompt(self, progress, candidates=1):
        """Of the last `candidates` requests served, the prompt whose best
        worker holds the longest prefix, and the router's answer for it."""
        done = progress["requests_done"]
        best, best_longest = (None, None), -1
        for r in range(done - 1, max(done - candidates, 0) - 1, -1):
            out = subprocess.run([self.procs.tool("kvindex-mockengine"), "--trace", self.trace,
                                  "--print-prompt", str(r)], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode != 0:
                continue
            tokens = json.loads(out.stdout)
            answer = self.router.call("POST", "/v1/match", {"model": MODEL, "tokens": tokens})
            longest = answer["workers"][0]["longest"] if answer["workers"] else 0
            if longest > best_longest:
                best, best_longest = (tokens, answer), longest
        return best

    def screen(self, progress, state, baseline, match, final=False):
        report = progress["report"]
        now = time.monotonic()
        events, since = self.last_events
        rate = (state["applied_seq"] - events) / max(now - since, 1e-3)
        self.last_events = (state["applied_seq"], now)
        lat = report["match_latency_us"]
        parts = ["kvindex quick start: %d simulated vLLM engines, Mooncake trace, "
                 "routed kv-aware through kvindex-router --embedded (%s)" %
                 (self.workers, "done" if final else "running %.0f s" % (now - self.started))]
        parts.append(table(
            "Progress: requests the simulated gateway placed by asking POST /v1/match, and the "
            "KV events the router applied.",
            ["requests", "events applied", "events/s", "match p50", "match p99"],
            [["%d / %d" % (progress["requests_done"], progress["requests_total"]),
              state["applied_seq"], "%.0f" % rate,
              "%.0f us" % lat["p50"] if lat["count"] else "-",
              "%.0f us" % lat["p99"] if lat["count"] else "-"]]))
        entries = state["entries"]
        parts.append(table(
            "Index: (worker, block) entries per tier. host = blocks the engines offloaded to "
            "CPU memory; applied_seq = events applied; digest = hash of every entry "
            "(semantics.md 6), equal on every exact replica.",
            ["device", "host", "disk", "sources", "applied_seq", "digest"],
            [[entries["device"], entries["host"], entries["disk"], state["sources"],
              state["applied_seq"], state["digest"]]]))
        rr = baseline
        parts.append(table(
            "Routing: share of prompt blocks the chosen engine already had cached (prefill "
            "skipped). round-robin = the same trace and engines, placed in turn (whole run).",
            ["policy", "requests", "hit rate", "on GPU", "on CPU", "prefill tokens saved",
             "busiest / mean"],
            [["kv-aware (kvindex)", report["requests"], percent(report["hit_rate"]),
              percent(report["hit_rate_by_tier"]["device"]),
              percent(report["hit_rate_by_tier"]["host"]),
              "{:,}".format(report["prefill_tokens_saved"]),
              "%.2f" % report["load"]["max_over_mean"]],
             ["round-robin", rr["requests"], percent(rr["hit_rate"]),
              percent(rr["hit_rate_by_tier"]["device"]),
              percent(rr["hit_rate_by_tier"]["host"]),
              "{:,}".format(rr["prefill_tokens_saved"]),
              "%.2f" % rr["load"]["max_over_mean"]]]))
        if match is not None:
            rows = [[w["worker"], w["longest"], w["device"], w["host"], w["device_prefix"]]
                    for w in match["workers"][:8]]
            parts.append(table(
                "Match of a recent prompt (%d blocks of %d tokens): every conversation starts "
                "with the same 512-token system prompt, so every worker shows at least 32 "
                "shared blocks; the worker that served this conversation holds the rest." %
                (match["blocks"], BLOCK_SIZE),
                ["worker", "longest", "on GPU", "on CPU", "GPU prefix"], rows or [["-"] * 5]))
        return "\n\n".join(parts)

    def show(self, text):
        if self.interactive:
            sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
        else:
            sys.stdout.write(text + "\n\n")
        sys.stdout.flush()

    def run(self):
        print("demo: logs and files in %s" % self.dir, flush=True)
        baseline = self.baseline()
        sim = self.start()
        period = 1.0 if self.interactive else 5.0
        match = None
        next_match = 0
        while True:
            if sim.poll() is not None:
                raise SystemExit("demo: kvindex-mockengine exited with %s (see %s)" %
                                 (sim.returncode, self.dir))
            progress, state = self.snapshot()
            done = progress["requests_done"] == progress["requests_total"]
            if time.monotonic() >= next_match or done:
                match = self.sample_prompt(progress)[1] or match
                next_match = time.monotonic() + 3
            if done:
                break
            self.show(self.screen(progress, state, baseline, match))
            time.sleep(period)
        truth = self.truth.call("GET", "/v1/truth")
        self.procs.wait_until("the router's digest to equal the ground truth's %s" % truth["digest"],
                  lambda: self.router.call("GET", "/v1/state")["digest"] == truth["digest"], 60)
        progress, state = self.snapshot()
        tokens, match = self.sample_prompt(progress, candidates=20)
        self.show(self.screen(progress, state, baseline, match, final=True))
        report = progress["report"]
        print("  Ground truth: the router's digest %s equals the engines' own (%d sources "
              "checked by GET 127.0.0.1:%d/v1/truth).\n  kv-aware routing cached %s of prompt "
              "blocks against %s for round-robin.\n" %
              (state["digest"], len(truth["sources"]), self.truth_port,
               percent(report["hit_rate"]).strip(), percent(baseline["hit_rate"]).strip()))
        self.try_lines(tokens)
        if self.interactive:
            print("The API stays up at http://127.0.0.1:%d (Ctrl-C to stop)." % self.http_port,
                  flush=True)
            try:
                signal.pause()
            except KeyboardInterrupt:
                pass

    def try_lines(self, tokens):
        prompt = os.path.join(self.dir, "prompt.json")
        with open(prompt, "w") as f:
            json.dump({"model": MODEL, "tokens": tokens}, f)
        csv = os.path.join(self.dir, "prompt-tokens.txt")
        with open(csv, "w") as f:
            f.write(",".join(map(str, tokens)))
        router = "http://127.0.0.1:%d" % self.http_port
        ctl = os.path.relpath(self.procs.tool("kvindex-ctl"))
        print("Try (the prompt files hold that recent prompt, %d tokens; kvindex-ctl takes its "
              "first 4096, one command-line argument's worth):" % len(tokens))
        for line in ("%s state --router %s" % (ctl, router),
                     "%s workers --router %s" % (ctl, router),
                     "%s match --router %s --model %s --tokens \"$(cut -d, -f1-4096 %s)\"" %
                     (ctl, router, MODEL, csv),
                     "curl -s -X POST %s/v1/match -d @%s" % (router, prompt),
                     "curl -s %s/metrics | grep '^kvindex_router_index'" % router):
            print("  " + line)
        print(flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    args = parser.parse_args()
    demo = Demo(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        demo.run()
    except KeyboardInterrupt:
        pass
    finally:
        demo.procs.stop_all()
        if os.environ.get("KVINDEX_DEMO_KEEP_FILES", "0") != "1":
            shutil.rmtree(demo.dir, ignore_errors=True)
    print("demo: done")


if __name__ == "__main__":
    main()
