#include "services/bench/index/index_bench.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "services/bench/index/baseline_index.h"
#include "services/bench/index/clear_workload.h"
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
  uint32_t runs = 1;         // peer: fresh builds of the index
  bool profile = false;      // peer: locator load, growths, probe lengths
  bool lock_memory = true;
  uint64_t clear_entries = 10000000;  // clear: entries in the index
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

// --profile: the block locator seen from outside the index, sampled after
// requests (outside the timed spans): load and apply rate per twentieth of
// the stream, every growth with the apply time of the request that paid for
// it, and probe-length histograms (a scan of every slot) per segment.
class LocatorProfiler {
 public:
  LocatorProfiler(const index::KvIndex& idx, const PeerStream& stream)
      : idx_(idx), stream_(stream), segment_(std::max<size_t>(1, stream.requests.size() / 20)) {}

  void AfterApply(size_t r, uint64_t apply_ns) {
    const PeerRequest& req = stream_.requests[r];
    seg_ns_ += apply_ns;
    seg_ops_ += req.removed.block_hashes.size() + req.stored.block_hashes.size();
    std::optional<index::LocatorProfile> p = idx_.ProfileLocator(kPeerModel, false);
    if (!p) return;
    if (p->capacity != capacity_ && capacity_ != 0) {
      growths_.push_back({{"request", r},
                          {"old_capacity", capacity_},
                          {"new_capacity", p->capacity},
                          {"used", p->used},
                          {"overflow", p->overflow_growths != overflow_growths_},
                          {"request_apply_ms", static_cast<double>(apply_ns) * 1e-6}});
      growth_ns_ += apply_ns;
    }
    capacity_ = p->capacity;
    overflow_growths_ = p->overflow_growths;
    if ((r + 1) % segment_ == 0 || r + 1 == stream_.requests.size()) {
      *p = *idx_.ProfileLocator(kPeerModel, true);
      segments_.push_back(Segment(r + 1, *p));
      seg_ns_ = seg_ops_ = 0;
    }
  }

  nlohmann::json Json() const {
    return {{"segments", segments_},
            {"growths", growths_},
            {"growth_requests_apply_s", static_cast<double>(growth_ns_) * 1e-9}};
  }

  static void Print(const nlohmann::json& p) {
    std::printf("  profile (per segment: apply rate, locator load, probe lengths in lines):\n");
    std::printf("    %9s %8s %7s %9s %9s %6s %9s %9s %8s\n", "requests", "apply M/s", "load",
                "hit mean", "hit p99", "max d", "miss mean", "max miss", "tag fp");
    for (const nlohmann::json& s : p["segments"]) {
      std::printf("    %9llu %8.2f %7.3f %9.2f %9llu %6llu %9.2f %9llu %8llu\n",
                  static_cast<unsigned long long>(s["requests"].get<uint64_t>()),
                  s["apply_block_ops_per_s"].get<double>() * 1e-6, s["load"].get<double>(),
                  s["hit_probe_mean"].get<double>(),
                  static_cast<unsigned long long>(s["hit_probe_p99"].get<uint64_t>()),
                  static_cast<unsigned long long>(s["max_displacement"].get<uint64_t>()),
                  s["miss_probe_mean"].get<double>(),
                  static_cast<unsigned long long>(s["max_cluster"].get<uint64_t>()),
                  static_cast<unsigned long long>(s["tag_false_matches"].get<uint64_t>()));
    }
    std::printf("  growths (%zu; requests that paid for them: %.2f s of apply):\n",
                p["growths"].size(), p["growth_requests_apply_s"].get<double>());
    for (const nlohmann::json& g : p["growths"]) {
      std::printf("    request %8llu: %llu -> %llu slots at %llu blocks%s, %.1f ms\n",
                  static_cast<unsigned long long>(g["request"].get<uint64_t>()),
                  static_cast<unsigned long long>(g["old_capacity"].get<uint64_t>()),
                  static_cast<unsigned long long>(g["new_capacity"].get<uint64_t>()),
                  static_cast<unsigned long long>(g["used"].get<uint64_t>()),
                  g["overflow"].get<bool>() ? " (probe overflow)" : "",
                  g["request_apply_ms"].get<double>());
    }
  }

 private:
  nlohmann::json Segment(size_t requests, const index::LocatorProfile& p) const {
    // In cache lines (locator buckets): a hit d buckets past its home reads
    // d + 1 lines; a miss reads up to the first bucket nothing overflowed.
    uint64_t hits = 0, hit_slots = 0, max_d = 0, p99 = 0;
    for (size_t d = 0; d < p.displacement.size(); ++d) {
      hits += p.displacement[d];
      hit_slots += p.displacement[d] * (d + 1);
      if (p.displacement[d] != 0) max_d = d;
    }
    for (uint64_t d = 0, seen = 0; d < p.displacement.size(); ++d) {
      seen += p.displacement[d];
      if (seen * 100 >= hits * 99) {
        p99 = d + 1;
        break;
      }
    }
    // clusters[l]: home buckets from which a miss reads l lines.
    double miss_lines = 0;
    uint64_t homes = 0, max_cluster = 0;
    for (size_t l = 1; l < p.clusters.size(); ++l) {
      miss_lines += static_cast<double>(p.clusters[l]) * static_cast<double>(l);
      homes += p.clusters[l];
      if (p.clusters[l] != 0) max_cluster = l;
    }
    const double cap = static_cast<double>(p.capacity);
    return {
        {"requests", requests},
        {"apply_block_ops_per_s",
         seg_ns_ ? static_cast<double>(seg_ops_) * 1e9 / static_cast<double>(seg_ns_) : 0.0},
        {"capacity", p.capacity},
        {"used", p.used},
        {"load", static_cast<double>(p.used) / cap},
        {"growths", p.growths},
        {"overflow_growths", p.overflow_growths},
        {"hit_probe_mean", hits ? static_cast<double>(hit_slots) / static_cast<double>(hits) : 0},
        {"hit_probe_p99", p99},
        {"max_displacement", max_d},
        {"miss_probe_mean", homes ? miss_lines / static_cast<double>(homes) : 0.0},
        {"max_cluster", max_cluster},
        {"tag_false_matches", p.tag_false_matches},
        {"displacement_histogram", p.displacement},
        {"cluster_histogram", p.clusters}};
  }

  const index::KvIndex& idx_;
  const PeerStream& stream_;
  const size_t segment_;
  uint64_t seg_ns_ = 0, seg_ops_ = 0, growth_ns_ = 0;
  uint64_t capacity_ = 0, overflow_growths_ = 0;
  nlohmann::json segments_ = nlohmann::json::array();
  nlohmann::json growths_ = nlohmann::json::array();
};

// The figures --runs reports as min / median / max.
constexpr const char* kRunFigures[] = {
    "apply_block_ops_per_s", "lookup_p50_ns",     "lookup_p99_ns",  "lookup_p999_ns",
    "final_warm_p50_ns",     "final_warm_p99_ns", "bytes_per_entry"};

nlohmann::json RunSummary(const std::vector<nlohmann::json>& runs) {
  nlohmann::json summary;
  for (const char* key : kRunFigures) {
    std::vector<double> v;
    for (const nlohmann::json& r : runs) v.push_back(r[key].get<double>());
    nlohmann::json all = v;
    std::sort(v.begin(), v.end());
    // The lower middle for an even count: a figure some run measured.
    summary[key] = {
        {"min", v.front()}, {"median", v[(v.size() - 1) / 2]}, {"max", v.back()}, {"runs", all}};
  }
  return summary;
}

void PrintRunSummary(const nlohmann::json& summary, size_t runs) {
  std::printf("  kvindex over %zu fresh builds of the index:\n", runs);
  std::printf("    %-26s %10s %10s %10s   runs\n", "figure", "min", "median", "max");
  auto row = [&](const char* name, const char* key, double scale) {
    const nlohmann::json& f = summary[key];
    std::printf("    %-26s %10.2f %10.2f %10.2f  ", name, f["min"].get<double>() * scale,
                f["median"].get<double>() * scale, f["max"].get<double>() * scale);
    for (const nlohmann::json& v : f["runs"]) std::printf(" %.2f", v.get<double>() * scale);
    std::printf("\n");
  };
  row("apply (M block-ops/s)", "apply_block_ops_per_s", 1e-6);
  row("lookup p50 writing (us)", "lookup_p50_ns", 1e-3);
  row("lookup p99 writing (us)", "lookup_p99_ns", 1e-3);
  row("lookup p99.9 writing (us)", "lookup_p999_ns", 1e-3);
  row("final state p50 (us)", "final_warm_p50_ns", 1e-3);
  row("final state p99 (us)", "final_warm_p99_ns", 1e-3);
  row("bytes per entry", "bytes_per_entry", 1);
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
    if (key == "baseline" || key == "ratios" || key == "targets_met" || key == "checksums" ||
        key == "runs" || key == "profile") {
      continue;
    }
    if (key.rfind("lookup_", 0) == 0 || key.rfind("apply_", 0) == 0 || key == "entries" ||
        key == "bytes_per_entry" || key == "workload" || key == "bytes_allocated" ||
        key == "lookups") {
      continue;
    }
    std::printf("  %s: %s\n", key.c_str(), value.dump().c_str());
  }
  if (o.contains("runs")) PrintRunSummary(o["runs"], o["runs"]["bytes_per_entry"]["runs"].size());
  if (o.contains("profile")) LocatorProfiler::Print(o["profile"]);
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

  auto figures = [&](PeerRun* run) {
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
  // Every run builds a fresh index; the report's single figures are the
  // last run's, --runs adds min / median / max over all of them.
  PeerRun ours_run, base_run;
  nlohmann::json ours;
  std::vector<nlohmann::json> runs;
  bool runs_agree = true;
  for (uint32_t r = 0; r < opt.runs; ++r) {
    if (opt.runs > 1) std::fprintf(stderr, "peer: kvindex run %u of %u\n", r + 1, opt.runs);
    index::KvIndex idx;
    LocatorProfiler profiler(idx, stream);
    PeerHook hook;
    if (opt.profile) hook = [&](size_t i, uint64_t ns) { profiler.AfterApply(i, ns); };
    PeerRun run = RunPeer(idx, stream, hook);
    ours = figures(&run);
    if (opt.profile) ours["profile"] = profiler.Json();
    if (r > 0) {
      runs_agree = runs_agree && run.depth_interleaved == ours_run.depth_interleaved &&
                   run.depth_final == ours_run.depth_final &&
                   TotalEntries(run.stats) == TotalEntries(ours_run.stats);
    }
    ours_run = std::move(run);
    runs.push_back(ours);
  }
  if (opt.runs > 1) (*out)["runs"] = RunSummary(runs);
  if (!opt.no_baseline) {
    std::fprintf(stderr, "peer: running baseline\n");
    BaselineIndex base(kPeerModel);
    base_run = RunPeer(base, stream);
    (*out)["baseline"] = figures(&base_run);
  } else {
    base_run = ours_run;
    (*out)["baseline"] = ours;
  }
  for (auto& [k, v] : ours.items()) (*out)[k] = v;
  (*out)["block_ops"] = ours_run.block_ops;
  (*out)["copies"] = opt.copies;
  (*out)["capacity"] = opt.capacity;

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
  list.push_back({"runs_agree", runs_agree ? 1u : 0u, 1});
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

// --workload clear: no trace, no baseline (clear_workload.h).
int RunClear(const Options& opt, bool locked) {
  ClearConfig config;
  config.entries = opt.clear_entries;
  if (opt.runs > 1) config.runs = opt.runs;
  nlohmann::json out;
  out["workload"] = "clear";
  out["memory_locked"] = locked;
  const int rc = RunClearWorkload(config, &out);
  if (opt.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("clear of %llu sources in %llu entries (%llu sources):\n",
                static_cast<unsigned long long>(out["sources_per_clear"].get<uint64_t>()),
                static_cast<unsigned long long>(out["entries"].get<uint64_t>()),
                static_cast<unsigned long long>(out["sources"].get<uint64_t>()));
    for (const nlohmann::json& r : out["runs"]) {
      std::printf(
          "  %8.2f ms  passes %llu  lock holds %llu  longest hold %9.1f us  "
          "most nodes per hold %llu\n",
          r["clear_ms"].get<double>(), static_cast<unsigned long long>(r["passes"].get<uint64_t>()),
          static_cast<unsigned long long>(r["lock_holds"].get<uint64_t>()),
          r["longest_hold_us"].get<double>(),
          static_cast<unsigned long long>(r["most_nodes_per_hold"].get<uint64_t>()));
    }
    std::printf(
        "  reader's slowest match: %.1f us during clears, %.1f us otherwise (%llu during)\n",
        static_cast<double>(out["reader_max_ns_during_clears"].get<uint64_t>()) * 1e-3,
        static_cast<double>(out["reader_max_ns_otherwise"].get<uint64_t>()) * 1e-3,
        static_cast<unsigned long long>(out["reader_matches_during_clears"].get<uint64_t>()));
    std::printf("  entries after each clear and restore as expected: %s\n",
                out["entries_ok"].get<bool>() ? "yes" : "NO");
  }
  return rc;
}

}  // namespace

int RunIndexBench(int argc, char** argv) {
  Options opt;
  CLI::App app{
      "kvindex-bench index: apply throughput, lookup latency and bytes per entry of the "
      "tiered index next to an in-run hash-map baseline",
      "kvindex-bench index"};
  app.add_option("--workload", opt.workload, "trace, peer or clear (docs/benchmarks.md)")
      ->check(CLI::IsMember({"trace", "peer", "clear"}));
  app.add_option("--clear-entries", opt.clear_entries,
                 "clear: entries in the index when one agent's 8 sources are cleared");
  app.add_option("--trace", opt.trace, "Mooncake trace (JSON lines with hash_ids)");
  app.add_flag("--json", opt.json, "print one JSON object instead of the text report");
  app.add_option("--workers", opt.workers, "simulated workers (sources)");
  app.add_option("--requests", opt.requests, "use only the first N trace lines (0 = all)");
  // The peer workload's scale knobs: final entries = workers x capacity when
  // the copies hold enough blocks (D = 4, C = 156,250: 10 M, the reference;
  // D = 16, C = 625,000: 40 M; D = 64, C = 2,500,000: 160 M). Checksums are
  // published only for the reference; any other size checks kvindex against
  // the simulation and the baseline.
  app.add_option("--copies", opt.copies,
                 "peer: disjoint copies of the trace (D); scale knob with --capacity "
                 "(16 with --capacity 625000: 40 M entries, 64 with 2500000: 160 M)");
  app.add_option("--capacity", opt.capacity,
                 "peer: blocks per worker (C); final entries = workers x capacity "
                 "(default 156250: 10 M entries)");
  app.add_option("--runs", opt.runs,
                 "peer: build the index N times fresh, print min / median / max of each figure")
      ->check(CLI::Range(1u, 100u));
  app.add_flag("--profile", opt.profile,
               "peer: sample the block locator outside the timed spans (load and apply rate per "
               "twentieth of the stream, growths, probe-length histograms)");
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
  if (opt.workload == "clear") return RunClear(opt, locked);
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
