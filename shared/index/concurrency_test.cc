// Concurrency stress: one writer applies a scripted event stream (stores,
// removals, clears that rebuild the table, bulk stores that grow it) while
// several readers match. Every read is checked against the states the writer
// passed through while the read ran: a reader may undercount, but must never
// report a longer prefix (or device prefix) than every one of those states,
// and so never a block whose removal returned before the read began.
// Bounded by iteration counts, not time; a few seconds on 2 cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"

namespace kvindex::index {
namespace {

constexpr int kChains = 4;
constexpr int kChainLength = 24;
constexpr int kScriptEvents = 600;
constexpr int kRepetitions = 12;
constexpr int kReaders = 2;

struct Bound {
  uint8_t longest = 0;
  uint8_t device_prefix = 0;
};

struct Script {
  std::vector<PlacementEvent> events;  // ends with every source cleared
  std::vector<std::vector<uint64_t>> queries;
  std::vector<SourceKey> sources;
  // expected[state][query][source]; state 0 = empty, state i = after event i-1.
  std::vector<std::vector<std::vector<Bound>>> expected;
};

Script MakeScript(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Script script;
  std::vector<std::vector<uint64_t>> chains(kChains);
  for (int c = 0; c < kChains; ++c) {
    for (int k = 0; k < kChainLength; ++k) {
      // Chains share their first 8 blocks: one trunk, four branches.
      chains[c].push_back(k < 8 ? 1000 + k : 100000 * (c + 1) + k);
    }
  }
  for (int c = 0; c < kChains; ++c) {
    script.queries.push_back(chains[c]);
    script.queries.emplace_back(chains[c].begin(), chains[c].begin() + 12);
  }
  script.sources = {{"a", 0}, {"a", 1}, {"b", 0}, {"c", 0}};
  const SourceKey filler{"filler", 0};
  auto event = [&](PlacementKind kind, const SourceKey& source) {
    PlacementEvent e;
    e.kind = kind;
    e.model = "m";
    e.source = source;
    e.block_size = 16;
    e.tier = static_cast<Tier>(rng() % kNumTiers);
    return e;
  };
  for (int i = 0; i < kScriptEvents; ++i) {
    const SourceKey& source = script.sources[rng() % script.sources.size()];
    const std::vector<uint64_t>& chain = chains[rng() % kChains];
    const uint64_t dice = rng() % 100;
    if (dice < 45) {
      PlacementEvent e = event(PlacementKind::kStored, source);
      const size_t from = rng() % 6, to = from + rng() % (kChainLength - from) + 1;
      e.block_hashes.assign(chain.begin() + from, chain.begin() + to);
      script.events.push_back(e);
    } else if (dice < 85) {
      PlacementEvent e = event(PlacementKind::kRemoved, source);
      if (rng() % 2) {
        for (uint64_t h : chain) {
          if (rng() % 3 == 0) e.block_hashes.push_back(h);
        }
      } else {
        // A contiguous run, leaf-first (LRU eviction): cuts nodes in the middle.
        const size_t from = rng() % kChainLength, to = from + rng() % (kChainLength - from) + 1;
        e.block_hashes.assign(chain.rbegin() + (kChainLength - to),
                              chain.rbegin() + (kChainLength - from));
      }
      // Remove trunk blocks often: they cut every chain's prefix.
      if (rng() % 2) e.block_hashes.push_back(chain[rng() % 8]);
      script.events.push_back(e);
    } else if (dice < 90) {
      script.events.push_back(event(PlacementKind::kCleared, source));
    } else if (dice < 95) {
      // Bulk store: grows the table on the first repetition, churns it later.
      PlacementEvent e = event(PlacementKind::kStored, filler);
      for (int k = 0; k < 3000; ++k) e.block_hashes.push_back(rng() | (uint64_t{1} << 63));
      script.events.push_back(e);
    } else {
      // Clearing the bulk source frees many nodes under the readers.
      script.events.push_back(event(PlacementKind::kCleared, filler));
    }
  }
  for (const SourceKey& s : script.sources)
    script.events.push_back(event(PlacementKind::kCleared, s));
  script.events.push_back(event(PlacementKind::kCleared, filler));

  // Expected answers of every state, from the oracle.
  ReferenceIndex oracle;
  PlacementEvent seed_model = event(PlacementKind::kStored, filler);
  auto snapshot = [&]() {
    std::vector<std::vector<Bound>> per_query;
    for (const auto& q : script.queries) {
      std::vector<Bound> row(script.sources.size());
      auto r = oracle.MatchSequenceHashes("m", q);
      if (r.ok()) {
        for (const WorkerMatch& w : r->workers) {
          auto it = std::find(script.sources.begin(), script.sources.end(), w.source);
          if (it == script.sources.end()) continue;
          row[it - script.sources.begin()] = {static_cast<uint8_t>(w.longest),
                                              static_cast<uint8_t>(w.device_prefix)};
        }
      }
      per_query.push_back(row);
    }
    return per_query;
  };
  script.expected.push_back(snapshot());
  uint64_t position = 0;
  for (const PlacementEvent& e : script.events) {
    oracle.Apply(e, ++position);
    script.expected.push_back(snapshot());
  }
  return script;
}

TEST(ConcurrencyTest, ReadersNeverOvercountWhileOneWriterApplies) {
  const Script script = MakeScript(42);
  const uint64_t len = script.events.size();
  const uint64_t total = len * kRepetitions;
  KvIndex index;
  // Create the model before readers start so every query finds it.
  PlacementEvent init;
  init.kind = PlacementKind::kStored;
  init.model = "m";
  init.block_size = 16;
  init.source = {"init", 0};
  ASSERT_TRUE(index.Apply(init, 1).applied);
  std::atomic<uint64_t> done{0};  // events of the script fully applied
  std::atomic<bool> stop{false};

  auto state_of = [&](uint64_t applied) { return applied == 0 ? 0 : (applied - 1) % len + 1; };

  std::atomic<uint64_t> reads{0}, violations{0}, nonzero{0};
  std::vector<std::string> first_violation(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r);
      while (!stop.load(std::memory_order_acquire)) {
        const size_t q = rng() % script.queries.size();
        const uint64_t v1 = done.load(std::memory_order_acquire);
        auto result = index.MatchSequenceHashes("m", script.queries[q]);
        const uint64_t v2 = std::min(done.load(std::memory_order_acquire) + 1, total);
        reads.fetch_add(1, std::memory_order_relaxed);
        if (!result.ok()) continue;
        for (const WorkerMatch& w : result->workers) {
          auto it = std::find(script.sources.begin(), script.sources.end(), w.source);
          if (it == script.sources.end()) continue;
          const size_t s = it - script.sources.begin();
          Bound bound;
          for (uint64_t v = v1; v <= v2 && v <= v1 + len; ++v) {
            const Bound& b = script.expected[state_of(v)][q][s];
            bound.longest = std::max(bound.longest, b.longest);
            bound.device_prefix = std::max(bound.device_prefix, b.device_prefix);
          }
          nonzero.fetch_add(1, std::memory_order_relaxed);
          if (w.longest > bound.longest || w.device_prefix > bound.device_prefix ||
              w.device + w.host + w.disk + w.external != w.longest) {
            if (violations.fetch_add(1) == 0) {
              first_violation[r] = "query " + std::to_string(q) + " source " + w.source.worker +
                                   " longest " + std::to_string(w.longest) + " > bound " +
                                   std::to_string(bound.longest) + " in states [" +
                                   std::to_string(v1) + "," + std::to_string(v2) + "]";
            }
          }
        }
      }
    });
  }

  uint64_t position = 1;
  for (uint64_t i = 0; i < total; ++i) {
    index.Apply(script.events[i % len], ++position);
    done.store(i + 1, std::memory_order_release);
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();

  for (const auto& v : first_violation) EXPECT_TRUE(v.empty()) << v;
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  // Readers saw rows: an index whose reads return no workers must fail here.
  EXPECT_GT(nonzero.load(), 0u);
  // The final state equals the script's final state (everything cleared).
  const IndexStats stats = index.Stats();
  EXPECT_EQ(stats.entries[0] + stats.entries[1] + stats.entries[2] + stats.entries[3], 0u);
  RecordProperty("reads", static_cast<int>(reads.load()));
  RecordProperty("rows_checked", static_cast<int>(nonzero.load()));
}

// A long walk (one node per block) while the writer moves a source between
// two states that each lack one end of the chain: "all but the last block"
// and "all but the first". No state holds the whole chain, so a reader that
// combined block 0 seen in one state with the last block seen in the other
// would report the full length. Readers must never do that.
TEST(ConcurrencyTest, LongWalksNeverCombineTwoStates) {
  constexpr uint64_t kLength = 6000;
  constexpr int kCycles = 20000;
  std::vector<uint64_t> chain(kLength);
  for (uint64_t k = 0; k < kLength; ++k) chain[k] = 0x9E3779B97F4A7C15ull * (k + 1);
  KvIndex index;
  uint64_t position = 0;
  auto apply = [&](PlacementKind kind, const std::string& worker, std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = kind;
    e.model = "m";
    e.source = {worker, 0};
    e.block_size = 16;
    e.block_hashes = std::move(hashes);
    index.Apply(e, ++position);
  };
  // "b" holds every other block, so every block is a node of its own.
  std::vector<uint64_t> even;
  for (uint64_t k = 0; k < kLength; k += 2) even.push_back(chain[k]);
  apply(PlacementKind::kStored, "b", even);
  apply(PlacementKind::kStored, "a", std::vector<uint64_t>(chain.begin(), chain.end() - 1));

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, full{0}, partial{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_acquire)) {
        auto result = index.MatchSequenceHashes("m", chain);
        reads.fetch_add(1, std::memory_order_relaxed);
        if (!result.ok()) continue;
        for (const WorkerMatch& w : result->workers) {
          if (w.source.worker != "a") continue;
          if (w.longest == kLength) full.fetch_add(1);
          if (w.longest == kLength - 1) partial.fetch_add(1);
        }
      }
    });
  }
  for (int c = 0; c < kCycles; ++c) {
    // all but the last -> all but the first -> all but the last, never all.
    apply(PlacementKind::kRemoved, "a", {chain.front()});
    apply(PlacementKind::kStored, "a", {chain.back()});
    apply(PlacementKind::kRemoved, "a", {chain.back()});
    apply(PlacementKind::kStored, "a", {chain.front()});
  }
  // The index now rests in "all but the last": let the readers see it, so a
  // reader that never reports the chain is caught below.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (partial.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(full.load(), 0u) << "a reader combined two states into a chain no state held";
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(partial.load(), 0u) << "readers never saw the chain all but its last block";
  RecordProperty("reads", static_cast<int>(reads.load()));
  RecordProperty("reads_in_state_all_but_last", static_cast<int>(partial.load()));
}

// One message clears eight sources that hold a long chain, one node per
// block, while readers walk it: the clear takes the removal lock for bounded
// runs of nodes, so readers see some nodes cleared and others not. That may
// shorten what they report, never lengthen it: the sources alternate
// between "all but the last block" and "all but the first" with a clear
// between, so no state holds the whole chain, and a read that starts after
// a clear returned and ends before the next store sees none of them.
TEST(ConcurrencyTest, ClearsInBoundedLockHoldsNeverOvercount) {
  constexpr uint64_t kLength = 3000;
  constexpr int kCycles = 60;
  constexpr uint32_t kRanks = 8;
  std::vector<uint64_t> chain(kLength);
  for (uint64_t k = 0; k < kLength; ++k) chain[k] = 0x9E3779B97F4A7C15ull * (k + 1);
  KvIndex index;
  std::atomic<uint64_t> position{0};
  auto store = [&](const std::string& worker, uint32_t rank, std::vector<uint64_t> hashes) {
    PlacementEvent e;
    e.kind = PlacementKind::kStored;
    e.model = "m";
    e.source = {worker, rank};
    e.block_size = 16;
    e.block_hashes = std::move(hashes);
    return e;
  };
  std::vector<uint64_t> even;
  for (uint64_t k = 0; k < kLength; k += 2) even.push_back(chain[k]);
  index.Apply(store("b", 0, even), ++position);
  std::vector<PlacementEvent> clears;
  for (uint32_t r = 0; r < kRanks; ++r) {
    PlacementEvent e;
    e.kind = PlacementKind::kCleared;
    e.source = {"a", r};
    clears.push_back(e);
  }
  // Even phases: "a" is cleared (a clear message returned); odd: stored.
  std::atomic<uint64_t> phase{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, full{0}, after_clear{0}, rows{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_acquire)) {
        const uint64_t p1 = phase.load(std::memory_order_acquire);
        auto result = index.MatchSequenceHashes("m", chain);
        const uint64_t p2 = phase.load(std::memory_order_acquire);
        reads.fetch_add(1, std::memory_order_relaxed);
        if (!result.ok()) continue;
        for (const WorkerMatch& w : result->workers) {
          if (w.source.worker != "a") continue;
          rows.fetch_add(1, std::memory_order_relaxed);
          if (w.longest >= kLength) full.fetch_add(1);
          if (p1 == p2 && p1 % 2 == 0) after_clear.fetch_add(1);
        }
      }
    });
  }
  for (int c = 0; c < kCycles; ++c) {
    std::vector<PlacementEvent> stores;
    for (uint32_t r = 0; r < kRanks; ++r) {
      stores.push_back(c % 2 == 0 ? store("a", r, {chain.begin(), chain.end() - 1})
                                  : store("a", r, {chain.begin() + 1, chain.end()}));
    }
    phase.fetch_add(1, std::memory_order_acq_rel);  // odd: stores begin
    index.ApplyMessage(stores, ++position);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    index.ApplyMessage(clears, ++position);
    phase.fetch_add(1, std::memory_order_acq_rel);  // even: the clear returned
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(full.load(), 0u) << "a reader combined states into a chain no state held";
  EXPECT_EQ(after_clear.load(), 0u) << "a reader saw a source after its clear returned";
  EXPECT_GT(rows.load(), 0u) << "readers never saw the stored sources";
  const IndexStats stats = index.Stats();
  EXPECT_EQ(stats.entries[0], even.size());  // only "b" is left
  RecordProperty("reads", static_cast<int>(reads.load()));
}

}  // namespace
}  // namespace kvindex::index
