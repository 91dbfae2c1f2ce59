#include "services/bench/aliases/alias_bench.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "services/bench/host/host_info.h"
#include "services/bench/index/latency.h"
#include "shared/compat/sglang_alias_map.h"
#include "shared/config/cli.h"
#include "shared/index/kv_index.h"

namespace kvindex::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Options {
  uint64_t aliases = uint64_t{1} << 20;
  uint32_t sources = 64;
  uint32_t chain = 32;
  uint32_t clears = 8;
  bool json = false;
};

}  // namespace

int RunAliasBench(int argc, char** argv) {
  Options opt;
  CLI::App app{"What a clear costs the SGLang alias map, next to the sweep it replaced",
               "kvindex-bench aliases"};
  app.add_option("--aliases", opt.aliases, "aliased blocks in the model")->capture_default_str();
  app.add_option("--sources", opt.sources, "sources holding them")->capture_default_str();
  app.add_option("--chain", opt.chain, "blocks per stored event")->capture_default_str();
  app.add_option("--clears", opt.clears, "sources cleared, one after the other")
      ->capture_default_str();
  app.add_flag("--json", opt.json, "print one JSON object");
  if (std::optional<int> code = config::Parse(app, argc, argv)) return *code;
  if (opt.sources == 0 || opt.chain == 0 || opt.clears > opt.sources) {
    std::fprintf(stderr, "kvindex-bench aliases: need sources > 0, chain > 0, clears <= sources\n");
    return 2;
  }

  const std::string model = "m";
  index::KvIndex plain, observed;
  compat::SglangAliasMap aliases(&observed,
                                 compat::SglangAliasOptions{.max_entries = opt.aliases + 1});
  observed.set_departure_observer(aliases.departure_observer());

  // Chains of distinct blocks; source c % sources stores chain c.
  uint64_t rng = 42, position = 0;
  std::vector<PlacementEvent> message;
  auto flush = [&] {
    if (message.empty()) return;
    ++position;
    plain.ApplyMessage(message, position);
    observed.ApplyMessage(message, position);
    aliases.OnApplied(message);
    message.clear();
  };
  const auto fill_start = Clock::now();
  const uint64_t chains = (opt.aliases + opt.chain - 1) / opt.chain;
  for (uint64_t c = 0; c < chains; ++c) {
    PlacementEvent& e = message.emplace_back();
    e.kind = PlacementKind::kStored;
    e.model = model;
    e.source = {"w" + std::to_string(c % opt.sources), 0};
    e.tier = Tier::kDevice;
    e.block_size = 16;
    const uint64_t n = std::min<uint64_t>(opt.chain, opt.aliases - c * opt.chain);
    for (uint64_t i = 0; i < n; ++i) {
      e.block_hashes.push_back(SplitMix(&rng));
      e.sglang_hashes.push_back(SplitMix(&rng));
    }
    if (message.size() == 64) flush();
  }
  flush();
  const double fill_s = MsSince(fill_start) / 1000;
  const uint64_t held_before = aliases.Stats().entries;
  // The map's part of a checkpoint's apply pause (storage/checkpointer.h:
  // saved on the writer thread at the capture's position).
  auto save_start = Clock::now();
  const size_t saved_bytes = aliases.SaveState().size();
  const double save_ms = MsSince(save_start);

  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> index_ms, observed_ms, on_applied_ms, sweep_ms;
  bool exact = held_before == opt.aliases;
  for (uint32_t k = 0; k < opt.clears; ++k) {
    // The aliases before the clear: what the old sweep walked.
    std::vector<uint64_t> canonical;
    canonical.reserve(aliases.Stats().entries);
    for (const compat::SglangAlias& alias : aliases.Entries()) {
      canonical.push_back(alias.canonical);
    }
    PlacementEvent clear;
    clear.kind = PlacementKind::kCleared;
    clear.model = model;
    clear.source = {"w" + std::to_string(k), 0};
    const std::span<const PlacementEvent> msg(&clear, 1);
    ++position;
    auto start = Clock::now();
    plain.ApplyMessage(msg, position);
    index_ms.push_back(MsSince(start));
    start = Clock::now();
    observed.ApplyMessage(msg, position);
    observed_ms.push_back(MsSince(start));
    const uint64_t before = aliases.Stats().entries;
    start = Clock::now();
    aliases.OnApplied(msg);
    on_applied_ms.push_back(MsSince(start));
    const uint64_t dropped = before - aliases.Stats().entries;
    // Baseline: every alias checked against the index (the old sweep).
    start = Clock::now();
    uint64_t unheld = 0;
    for (uint64_t hash : canonical) {
      StatusOr<index::MatchResult> r =
          observed.MatchSequenceHashes(model, std::span<const uint64_t>(&hash, 1));
      unheld += !(r.ok() && !r->workers.empty());
    }
    sweep_ms.push_back(MsSince(start));
    exact = exact && unheld == dropped;
    rows.push_back({{"aliases_before", before},
                    {"dropped", dropped},
                    {"index_clear_ms", index_ms.back()},
                    {"index_clear_observed_ms", observed_ms.back()},
                    {"on_applied_ms", on_applied_ms.back()},
                    {"sweep_baseline_ms", sweep_ms.back()}});
  }
  const uint64_t held_after = aliases.Stats().entries;
  exact = exact && held_after == opt.aliases - opt.clears * (opt.aliases / opt.sources);

  nlohmann::json out = {{"aliases", opt.aliases},
                        {"sources", opt.sources},
                        {"chain", opt.chain},
                        {"fill_s", fill_s},
                        {"save_state_ms", save_ms},
                        {"save_state_bytes", saved_bytes},
                        {"index_clear_ms_median", Median(index_ms)},
                        {"index_clear_observed_ms_median", Median(observed_ms)},
                        {"on_applied_ms_median", Median(on_applied_ms)},
                        {"sweep_baseline_ms_median", Median(sweep_ms)},
                        {"aliases_after", held_after},
                        {"exact", exact},
                        {"clears", rows},
                        {"host", HostJson()}};
  if (opt.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "%llu aliases over %u sources (chains of %u), filled in %.1f s; SaveState "
        "%.1f ms (%zu bytes)\n",
        static_cast<unsigned long long>(opt.aliases), opt.sources, opt.chain, fill_s, save_ms,
        saved_bytes);
    std::printf("%-6s %10s %9s %12s %14s %12s %16s\n", "clear", "aliases", "dropped", "index ms",
                "+observer ms", "OnApplied ms", "sweep (before) ms");
    for (size_t k = 0; k < rows.size(); ++k) {
      const nlohmann::json& r = rows[k];
      std::printf("%-6zu %10llu %9llu %12.2f %14.2f %12.2f %16.2f\n", k,
                  static_cast<unsigned long long>(r["aliases_before"].get<uint64_t>()),
                  static_cast<unsigned long long>(r["dropped"].get<uint64_t>()),
                  r["index_clear_ms"].get<double>(), r["index_clear_observed_ms"].get<double>(),
                  r["on_applied_ms"].get<double>(), r["sweep_baseline_ms"].get<double>());
    }
    std::printf(
        "median: index %.2f ms, with observer %.2f ms, OnApplied %.2f ms; the sweep it "
        "replaced %.2f ms; %s\n",
        Median(index_ms), Median(observed_ms), Median(on_applied_ms), Median(sweep_ms),
        exact ? "aliases exact" : "ALIASES NOT EXACT");
  }
  return exact ? 0 : 1;
}

}  // namespace kvindex::bench
