#include "services/bench/index/clear_workload.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "services/bench/index/latency.h"
#include "shared/index/kv_index.h"

namespace kvindex::bench {
namespace {

constexpr char kModel[] = "clear-bench";
constexpr uint32_t kChainBlocks = 32;
constexpr size_t kEventsPerMessage = 1024;

// Times the removal-lock holds of every clear pass (the index reads no clock).
class HoldTimer : public index::ClearObserver {
 public:
  void OnClearPass(const std::string&, size_t) override { ++passes; }
  void OnLockAcquired() override { t0_ = NowNs(); }
  void OnLockReleased(size_t nodes) override {
    longest_ns = std::max(longest_ns, NowNs() - t0_);
    most_nodes = std::max<uint64_t>(most_nodes, nodes);
    ++holds;
  }
  void Reset() { *this = HoldTimer(); }
  uint64_t passes = 0, holds = 0, longest_ns = 0, most_nodes = 0;

 private:
  uint64_t t0_ = 0;
};

struct Chain {
  std::vector<uint64_t> hashes;
};

uint64_t Entries(const index::IndexStats& s) {
  return s.entries[0] + s.entries[1] + s.entries[2] + s.entries[3];
}

}  // namespace

int RunClearWorkload(const ClearConfig& config, nlohmann::json* out) {
  std::mt19937_64 rng(config.seed);
  const uint32_t sources = config.agents * config.ranks;
  // Each source holds a chain with probability 1/8, a prefix of random
  // length (so holder sets differ along a chain, as prompts sharing a
  // system prompt do): about sources / 8 x 16.5 entries per chain.
  const double per_chain = sources / 8.0 * (kChainBlocks + 1) / 2.0;
  const size_t num_chains = static_cast<size_t>(static_cast<double>(config.entries) / per_chain);
  std::vector<Chain> chains(num_chains);
  // stores[s]: source s's stored events (one per chain it holds).
  std::vector<std::vector<PlacementEvent>> stores(sources);
  for (Chain& c : chains) {
    c.hashes.resize(kChainBlocks);
    for (uint64_t& h : c.hashes) h = rng() | 1;
    for (uint32_t s = 0; s < sources; ++s) {
      if (rng() % 8 != 0) continue;
      PlacementEvent e;
      e.kind = PlacementKind::kStored;
      e.model = kModel;
      e.source = {"agent" + std::to_string(s / config.ranks), s % config.ranks};
      e.tier = static_cast<Tier>(rng() % 2);
      e.block_size = 16;
      e.block_hashes.assign(c.hashes.begin(), c.hashes.begin() + 1 + rng() % kChainBlocks);
      stores[s].push_back(std::move(e));
    }
  }
  index::KvIndex idx;
  uint64_t position = 0;
  auto apply_sources = [&](uint32_t first, uint32_t last) {
    std::vector<PlacementEvent> message;
    for (uint32_t s = first; s < last; ++s) {
      for (const PlacementEvent& e : stores[s]) {
        message.push_back(e);
        if (message.size() == kEventsPerMessage) {
          idx.ApplyMessage(message, ++position);
          message.clear();
        }
      }
    }
    if (!message.empty()) idx.ApplyMessage(message, ++position);
  };
  apply_sources(0, sources);
  const index::IndexStats full = idx.Stats();
  const uint64_t nodes_hint = idx.DistinctBlocks(kModel);
  std::fprintf(stderr, "clear: %llu entries, %llu distinct blocks, %u sources\n",
               static_cast<unsigned long long>(Entries(full)),
               static_cast<unsigned long long>(nodes_hint), sources);

  // One reader matches random chains throughout; its slowest match while a
  // clear runs is what a router's request can wait.
  std::atomic<bool> stop{false}, clearing{false};
  std::atomic<uint64_t> reader_max_ns{0}, reader_max_idle_ns{0}, reads_during{0};
  std::thread reader([&] {
    std::mt19937_64 r(config.seed + 1);
    while (!stop.load(std::memory_order_relaxed)) {
      const Chain& c = chains[r() % chains.size()];
      const bool during = clearing.load(std::memory_order_acquire);
      uint32_t ns = 0;
      (void)TimedMatch(idx, kModel, c.hashes, &ns);
      std::atomic<uint64_t>& slot = during ? reader_max_ns : reader_max_idle_ns;
      if (ns > slot.load(std::memory_order_relaxed)) slot.store(ns, std::memory_order_relaxed);
      if (during) reads_during.fetch_add(1, std::memory_order_relaxed);
    }
  });

  HoldTimer timer;
  idx.SetClearObserverForTesting(&timer);
  std::vector<double> clear_ms, longest_hold_us;
  bool ok = true;
  nlohmann::json runs = nlohmann::json::array();
  for (uint32_t run = 0; run < config.runs; ++run) {
    const uint32_t agent = run % config.agents;
    std::vector<PlacementEvent> clears;
    for (uint32_t r = 0; r < config.ranks; ++r) {
      PlacementEvent e;
      e.kind = PlacementKind::kCleared;
      e.source = {"agent" + std::to_string(agent), r};
      clears.push_back(std::move(e));
    }
    uint64_t cleared_entries = 0;
    for (uint32_t s = agent * config.ranks; s < (agent + 1) * config.ranks; ++s) {
      for (const PlacementEvent& e : stores[s]) {
        // Distinct hashes per chain prefix: entries = blocks stored.
        cleared_entries += e.block_hashes.size();
      }
    }
    timer.Reset();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // idle reads first
    clearing.store(true, std::memory_order_release);
    const uint64_t t0 = NowNs();
    idx.ApplyMessage(clears, ++position);
    const uint64_t t1 = NowNs();
    clearing.store(false, std::memory_order_release);
    const uint64_t left = Entries(idx.Stats());
    ok = ok && left + cleared_entries == Entries(full);
    clear_ms.push_back(static_cast<double>(t1 - t0) * 1e-6);
    longest_hold_us.push_back(static_cast<double>(timer.longest_ns) * 1e-3);
    runs.push_back({{"clear_ms", clear_ms.back()},
                    {"passes", timer.passes},
                    {"lock_holds", timer.holds},
                    {"longest_hold_us", longest_hold_us.back()},
                    {"most_nodes_per_hold", timer.most_nodes},
                    {"entries_cleared", cleared_entries}});
    idx.SetClearObserverForTesting(nullptr);
    apply_sources(agent * config.ranks, (agent + 1) * config.ranks);  // restore
    idx.SetClearObserverForTesting(&timer);
    ok = ok && Entries(idx.Stats()) == Entries(full);
  }
  stop.store(true);
  reader.join();
  idx.SetClearObserverForTesting(nullptr);
  (*out)["entries"] = Entries(full);
  (*out)["sources"] = sources;
  (*out)["sources_per_clear"] = config.ranks;
  (*out)["runs"] = runs;
  (*out)["clear_ms_median"] = Median(clear_ms);
  (*out)["longest_hold_us_median"] = Median(longest_hold_us);
  (*out)["longest_hold_us_max"] = *std::max_element(longest_hold_us.begin(), longest_hold_us.end());
  (*out)["reader_max_ns_during_clears"] = reader_max_ns.load();
  (*out)["reader_max_ns_otherwise"] = reader_max_idle_ns.load();
  (*out)["reader_matches_during_clears"] = reads_during.load();
  (*out)["entries_ok"] = ok;
  return ok ? 0 : 1;
}

}  // namespace kvindex::bench
