#include "services/bench/index/index_bench.h"

#include <sys/mman.h>

#include <cstdio>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "services/bench/index/baseline_index.h"
#include "services/bench/index/latency.h"
#include "services/bench/index/peer_workload.h"
#include "services/bench/index/trace_runner.h"
#include "services/bench/index/trace_workload.h"
#include "shared/config/cli.h"
#include "shared/index/kv_index.h"
#include "shared/trace/mooncake_trace.h"

namespace kvindex::bench {
namespace {

struct Options {
  std::string workload = "trace";
  std::string trace = "data/mooncake/conversation_trace.jsonl";
  bool json = false;
  uint32_t workers = 64;
  size_t requests = 0;
  uint32_t copies = 4;
  uint64_t capacity = 156250;
  uint64_t min_entries = 10000000;
  double write_load = 0.5;
  size_t churn_requests = 4000;
  bool no_baseline = false;  // development only: skips the baseline run
  bool lock_memory = true;
};

// Targets of issue #4 (2-core machine, single writer thread).
constexpr double kTargetApply = 12e6;
constexpr double kTargetP50Ns = 1000;
constexpr double kTargetP99Ns = 4000;
constexpr double kTargetBytesPerEntry = 24;
constexpr double kTargetP99Ratio = 3;
constexpr double kTargetMemoryRatio = 2;

uint64_t TotalEntries(const index::IndexStats& s) {
  return s.entries[0] + s.entries[1] + s.entries[2] + s.entries[3];
}

nlohmann::json Figures(double apply, const Percentiles& lookup, const index::IndexStats& stats) {
  const uint64_t entries = TotalEntries(stats);
  return {
      {"apply_block_ops_per_s", apply},
      {"lookup_p50_ns", lookup.p50},
      {"lookup_p99_ns", lookup.p99},
      {"lookup_p999_ns", lookup.p999},
      {"lookup_mean_ns", lookup.mean},
      {"lookups", lookup.count},
      {"bytes_per_entry",
       entries ? static_cast<double>(stats.bytes_allocated) / static_cast<double>(entries) : 0.0},
      {"bytes_allocated", stats.bytes_allocated},
      {"entries", entries},
  };
}

void AddRatiosAndTargets(nlohmann::json* out) {
  nlohmann::json& o = *out;
  const nlohmann::json& b = o["baseline"];
  auto ratio = [](double num, double den) { return den > 0 ? num / den : 0.0; };
  o["ratios"] = {
      {"apply", ratio(o["apply_block_ops_per_s"], b["apply_block_ops_per_s"])},
      {"lookup_p50", ratio(b["lookup_p50_ns"], o["lookup_p50_ns"])},
      {"lookup_p99", ratio(b["lookup_p99_ns"], o["lookup_p99_ns"])},
      {"lookup_p999", ratio(b["lookup_p999_ns"], o["lookup_p999_ns"])},
      {"memory", ratio(b["bytes_per_entry"], o["bytes_per_entry"])},
  };
  o["targets_met"] = {
      {"apply_ge_12M", o["apply_block_ops_per_s"].get<double>() >= kTargetApply},
      {"p50_le_1us", o["lookup_p50_ns"].get<double>() <= kTargetP50Ns},
      {"p99_le_4us", o["lookup_p99_ns"].get<double>() <= kTargetP99Ns},
      {"bytes_le_24", o["bytes_per_entry"].get<double>() <= kTargetBytesPerEntry},
      {"p99_3x_baseline", o["ratios"]["lookup_p99"].get<double>() >= kTargetP99Ratio},
      {"memory_2x_baseline", o["ratios"]["memory"].get<double>() >= kTargetMemoryRatio},
  };
}

void PrintText(const nlohmann::json& o) {
  const nlohmann::json& b = o["baseline"];
  std::printf("kvindex-bench index --workload %s\n", o["workload"].get<std::string>().c_str());
  std::printf("  %-26s %14s %14s %8s\n", "figure", "kvindex", "baseline", "ratio");
  auto row = [&](const char* name, const char* key, const char* ratio_key, double scale,
                 const char* unit) {
    std::printf("  %-26s %12.2f%-2s %12.2f%-2s %7.2fx\n", name, o[key].get<double>() * scale, unit,
                b[key].get<double>() * scale, unit, o["ratios"][ratio_key].get<double>());
  };
  row("apply (M block-ops/s)", "apply_block_ops_per_s", "apply", 1e-6, "");
  row("lookup p50 (us)", "lookup_p50_ns", "lookup_p50", 1e-3, "");
  row("lookup p99 (us)", "lookup_p99_ns", "lookup_p99", 1e-3, "");
  row("lookup p99.9 (us)", "lookup_p999_ns", "lookup_p999", 1e-3, "");
  row("bytes per entry", "bytes_per_entry", "memory", 1, "");
  std::printf("  entries: %llu (baseline %llu)\n",
              static_cast<unsigned long long>(o["entries"].get<uint64_t>()),
              static_cast<unsigned long long>(b["entries"].get<uint64_t>()));
  for (const auto& [key, value] : o.items()) {
    if (key == "baseline" || key == "ratios" || key == "targets_met" || key == "checksums")
      continue;
    if (key.rfind("lookup_", 0) == 0 || key.rfind("apply_", 0) == 0 || key == "entries" ||
        key == "bytes_per_entry" || key == "workload" || key == "bytes_allocated" ||
        key == "lookups") {
      continue;
    }
    std::printf("  %s: %s\n", key.c_str(), value.dump().c_str());
  }
  if (o.contains("checksums")) {
    std::printf("  checksums:\n");
    for (const auto& [name, c] : o["checksums"].items()) {
      std::printf("    %-30s %14llu want %14llu  %s\n", name.c_str(),
                  static_cast<unsigned long long>(c["got"].get<uint64_t>()),
                  static_cast<unsigned long long>(c["want"].get<uint64_t>()),
                  c["ok"].get<bool>() ? "ok" : "MISMATCH");
    }
  }
  std::printf("  targets:");
  for (const auto& [name, met] : o["targets_met"].items()) {
    std::printf(" %s=%s", name.c_str(), met.get<bool>() ? "met" : "MISSED");
  }
  std::printf("\n");
}

int RunPeerWorkload(const Options& opt, const std::vector<trace::TraceRequest>& trace,
                    nlohmann::json* out) {
  PeerConfig config;
  config.copies = opt.copies;
  config.workers = opt.workers;
  config.capacity = opt.capacity;
  config.max_requests = opt.requests;
  const PeerStream stream = GeneratePeerStream(trace, config);
  std::fprintf(stderr, "peer: %zu requests generated; running kvindex\n", stream.requests.size());

  auto run_one = [&](index::IndexInterface& idx, PeerRun* run) {
    *run = RunPeer(idx, stream);
    Percentiles interleaved = ComputePercentiles(&run->interleaved_ns);
    Percentiles warm = ComputePercentiles(&run->final_warm_ns);
    nlohmann::json f =
        Figures(static_cast<double>(run->block_ops) / run->apply_seconds, interleaved, run->stats);
    f["final_warm_p50_ns"] = warm.p50;
    f["final_warm_p99_ns"] = warm.p99;
    f["depth_sum_interleaved"] = run->depth_interleaved;
    f["depth_sum_final"] = run->depth_final;
    return f;
  };
  PeerRun ours_run, base_run;
  nlohmann::json ours;
  {
    index::KvIndex idx;
    ours = run_one(idx, &ours_run);
  }
  if (!opt.no_baseline) {
    std::fprintf(stderr, "peer: running baseline\n");
    BaselineIndex base(kPeerModel);
    (*out)["baseline"] = run_one(base, &base_run);
  } else {
    base_run = ours_run;
    (*out)["baseline"] = ours;
  }
  for (auto& [k, v] : ours.items()) (*out)[k] = v;
  (*out)["block_ops"] = ours_run.block_ops;

  bool ok = true;
  nlohmann::json checks;
  std::vector<PeerCheck> list;
  if (config.IsReference()) list = PeerChecks(stream, ours_run);
  // Whatever the configuration, the baseline must agree with kvindex.
  list.push_back(
      {"baseline_depth_interleaved", base_run.depth_interleaved, ours_run.depth_interleaved});
  list.push_back({"baseline_depth_final", base_run.depth_final, ours_run.depth_final});
  list.push_back(
      {"index_entries_vs_simulated", TotalEntries(ours_run.stats), stream.final_entries});
  for (const PeerCheck& c : list) {
    checks[c.name] = {{"got", c.got}, {"want", c.want}, {"ok", c.ok()}};
    ok = ok && c.ok();
  }
  (*out)["checksums"] = checks;
  (*out)["checksums_ok"] = ok;
  (*out)["checksums_reference"] = config.IsReference();
  (*out)["peer_dynamo_crtc"] = {{"apply_block_ops_per_s", 6.34e6},
                                {"lookup_p50_ns", 2170},
                                {"lookup_p99_ns", 8100},
                                {"bytes_per_entry_range", {65.7, 125.7}}};
  return ok ? 0 : 1;
}

int RunTraceWorkload(const Options& opt, const std::vector<trace::TraceRequest>& trace,
                     nlohmann::json* out) {
  TraceConfig config;
  config.workers = opt.workers;
  config.min_entries = opt.min_entries;
  const TraceStream stream = GenerateTraceStream(trace, config);
  std::fprintf(stderr, "trace: %u fill copies, %zu + %zu requests, %llu entries\n", stream.copies,
               stream.fill.size(), stream.churn.size(),
               static_cast<unsigned long long>(stream.entries_after_churn));

  auto run_one = [&](auto make_index) {
    auto idx = make_index();
    TraceRun run = RunTrace(*idx, stream, opt.write_load, opt.churn_requests);
    Percentiles loaded = ComputePercentiles(&run.loaded_ns);
    Percentiles idle = ComputePercentiles(&run.idle_ns);
    nlohmann::json f = Figures(run.apply_ops_per_s, loaded, run.stats);
    f["idle_lookup_p50_ns"] = idle.p50;
    f["idle_lookup_p99_ns"] = idle.p99;
    f["write_rate_target"] = run.write_rate_target;
    f["write_rate_achieved"] = run.write_rate_achieved;
    f["fill_block_ops"] = run.fill_block_ops;
    f["entries_per_tier"] = {run.stats.entries[0], run.stats.entries[1], run.stats.entries[2],
                             run.stats.entries[3]};
    return f;
  };
  nlohmann::json ours = run_one([] { return std::make_unique<index::KvIndex>(); });
  if (!opt.no_baseline) {
    std::fprintf(stderr, "trace: running baseline\n");
    (*out)["baseline"] = run_one([] { return std::make_unique<BaselineIndex>(kTraceModel); });
  } else {
    (*out)["baseline"] = ours;
  }
  for (auto& [k, v] : ours.items()) (*out)[k] = v;
  (*out)["copies"] = stream.copies + 1;
  (*out)["write_load"] = opt.write_load;
  (*out)["churn_requests"] = opt.churn_requests;
  (*out)["block_ops"] = stream.fill_block_ops + stream.churn_block_ops;
  // Both indexes must hold exactly what the simulation holds (checked
  // against the simulator when the whole churn copy was applied).
  const uint64_t entries = ours["entries"].get<uint64_t>();
  const bool entries_ok = entries == (*out)["baseline"]["entries"].get<uint64_t>() &&
                          entries >= opt.min_entries &&
                          (opt.churn_requests != 0 || entries == stream.entries_after_churn);
  (*out)["entries_match_simulation"] = entries_ok;
  return entries_ok ? 0 : 1;
}

}  // namespace

int RunIndexBench(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "kvindex-bench index: apply throughput, lookup latency and bytes per entry of the "
      "tiered index next to an in-run hash-map baseline",
      "kvindex-bench index"};
  app.add_option("--workload", opt.workload, "trace or peer (docs/benchmarks.md)")
      ->check(CLI::IsMember({"trace", "peer"}));
  app.add_option("--trace", opt.trace, "Mooncake trace (JSON lines with hash_ids)");
  app.add_flag("--json", opt.json, "print one JSON object instead of the text report");
  app.add_option("--workers", opt.workers, "simulated workers (sources)");
  app.add_option("--requests", opt.requests, "use only the first N trace lines (0 = all)");
  app.add_option("--copies", opt.copies, "peer: disjoint copies of the trace (D)");
  app.add_option("--capacity", opt.capacity, "peer: blocks per worker (C)");
  app.add_option("--min-entries", opt.min_entries, "trace: copy the trace until this many entries");
  app.add_option("--churn-requests", opt.churn_requests,
                 "trace: churn requests applied while measuring lookups (0 = one whole copy)");
  app.add_flag("--no-baseline", opt.no_baseline, "skip the baseline (development runs only)");
  app.add_option("--write-load", opt.write_load,
                 "trace: writer rate during lookups, as a fraction of measured apply capacity");
  app.add_flag("--lock-memory,!--no-lock-memory", opt.lock_memory,
               "mlockall the process (default on): keeps the kernel's page reclaim and access "
               "monitoring (e.g. DAMON) from stalling lookups for 100+ us");
  if (std::optional<int> code = config::Parse(app, argc, argv)) return *code;

  // A production router would lock its index the same way (see
  // docs/benchmarks.md, "Measurement noise").
  const bool locked = opt.lock_memory && mlockall(MCL_CURRENT | MCL_FUTURE) == 0;
  StatusOr<std::vector<trace::TraceRequest>> trace = trace::ReadTrace(opt.trace, opt.requests);
  if (!trace.ok()) {
    std::fprintf(stderr, "kvindex-bench index: %s\n",
                 std::string(trace.status().message()).c_str());
    return 1;
  }
  nlohmann::json out;
  out["workload"] = opt.workload;
  out["trace"] = opt.trace;
  out["workers"] = opt.workers;
  out["memory_locked"] = locked;
  const int rc = opt.workload == "peer" ? RunPeerWorkload(opt, *trace, &out)
                                        : RunTraceWorkload(opt, *trace, &out);
  AddRatiosAndTargets(&out);
  if (opt.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    PrintText(out);
  }
  if (rc != 0) std::fprintf(stderr, "kvindex-bench index: FAILED (checksum or entry mismatch)\n");
  return rc;
}

}  // namespace kvindex::bench
