// Differential test: seeded random event streams through KvIndex and the
// ReferenceIndex oracle, comparing matches, digests, per-tier counts and
// sources after every step. A failure prints its seed; replay it with
//   KVINDEX_SEED=<seed> [KVINDEX_STEPS=<n>] kvindex_index_differential_test
// The self-test proves the harness catches an index that ignores removals.
// Under memory limits (a tight cap, or injected allocation failures) the
// oracle is given what KvIndex reports it applied (a stored event's head; a
// removal followed by a clear of its source), and a second oracle fed the
// whole stream proves KvIndex never holds an entry it was not given. At a
// low source limit both refuse the same stores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"

namespace kvindex::index {
namespace {

constexpr uint32_t kMaxSourcesPerModel = 4096;

struct StreamShape {
  int models = 3;
  int workers = 6;  // x ranks = sources
  int ranks = 3;
  int steps = 2500;
  int extend = 6;  // a store adds fewer than this many new blocks to its chain
  // Both indexes' source limit per model (KvIndexOptions::max_sources_per_model).
  uint32_t max_sources = kMaxSourcesPerModel;
};

// Memory limits in a stream: `a` (a KvIndex) may leave entries out.
struct Exhaustion {
  KvIndex* inject = nullptr;       // gets random allocation failures
  IndexInterface* full = nullptr;  // fed the whole stream: a superset of `a`
};

// A random prefix tree per model: chains share prefixes, as real prompts do.
class ChainForest {
 public:
  ChainForest(std::mt19937_64* rng, int extend) : rng_(rng), extend_(extend) {}
  // Path from the root to a random node, possibly extended by new nodes.
  std::vector<uint64_t> RandomPath(bool may_extend) {
    std::vector<uint64_t> path;
    size_t picked = kRoot;
    if (!nodes_.empty() && (*rng_)() % 4 != 0) picked = (*rng_)() % nodes_.size();
    for (size_t i = picked; i != kRoot; i = parent_[i]) path.push_back(nodes_[i]);
    std::reverse(path.begin(), path.end());
    if (may_extend) {
      size_t parent = picked;
      const int extra = static_cast<int>((*rng_)() % extend_);
      for (int i = 0; i < extra; ++i) {
        nodes_.push_back((*rng_)() | 1);  // random canonical hashes
        parent_.push_back(parent);
        parent = nodes_.size() - 1;
        path.push_back(nodes_.back());
      }
    }
    return path;
  }

 private:
  static constexpr size_t kRoot = static_cast<size_t>(-1);
  std::mt19937_64* rng_;
  int extend_;
  std::vector<uint64_t> nodes_;
  std::vector<size_t> parent_;
};

std::string Describe(const MatchResult& r) {
  std::ostringstream out;
  out << "{blocks=" << r.blocks << " seq=" << r.applied_seq;
  for (const WorkerMatch& w : r.workers) {
    out << " [" << w.source.worker << "/" << w.source.dp_rank << " L" << w.longest << " d"
        << w.device << " h" << w.host << " s" << w.disk << " e" << w.external << " dp"
        << w.device_prefix << "]";
  }
  return out.str() + "}";
}

// The blocks an index reported leaving it, and the stored ones it did not
// take, sorted per message.
class DepartureLog final : public DepartureObserver {
 public:
  using Blocks = std::vector<std::pair<std::string, uint64_t>>;
  void OnDeparted(std::string_view model, std::span<const uint64_t> hashes) override {
    for (uint64_t h : hashes) departed_.emplace_back(std::string(model), h);
  }
  void OnNotIndexed(std::string_view model, std::span<const uint64_t> hashes) override {
    for (uint64_t h : hashes) not_indexed_.emplace_back(std::string(model), h);
  }
  Blocks TakeDeparted() { return Take(&departed_); }
  Blocks TakeNotIndexed() { return Take(&not_indexed_); }

 private:
  static Blocks Take(Blocks* from) {
    Blocks out;
    out.swap(*from);
    std::sort(out.begin(), out.end());
    return out;
  }
  Blocks departed_, not_indexed_;
};

// Returns a description of the first divergence, or nullopt. `exhaustion`
// null: `a` must apply every event in full.
std::optional<std::string> RunStream(IndexInterface& a, IndexInterface& b, uint64_t seed,
                                     const StreamShape& shape,
                                     const Exhaustion* exhaustion = nullptr) {
  std::mt19937_64 rng(seed);
  std::vector<ChainForest> forests;
  for (int m = 0; m < shape.models; ++m) forests.emplace_back(&rng, shape.extend);
  auto model_name = [](int m) { return "model" + std::to_string(m); };
  DepartureLog departed_a, departed_b;
  a.set_departure_observer(&departed_a);
  b.set_departure_observer(&departed_b);
  struct Unset {
    IndexInterface &a, &b;
    ~Unset() {
      a.set_departure_observer(nullptr);
      b.set_departure_observer(nullptr);
    }
  } unset{a, b};
  uint64_t position = 0;
  uint64_t departures = 0, not_indexed = 0;
  for (int step = 0; step < shape.steps; ++step) {
    PlacementEvent e;
    const int m = static_cast<int>(rng() % shape.models);
    e.model = model_name(m);
    e.source = {"w" + std::to_string(rng() % shape.workers),
                static_cast<uint32_t>(rng() % shape.ranks)};
    e.tier = static_cast<Tier>(rng() % kNumTiers);
    e.block_size = 16;
    const uint64_t dice = rng() % 100;
    if (dice < 50) {
      e.kind = PlacementKind::kStored;
      std::vector<uint64_t> path = forests[m].RandomPath(true);
      // Store a suffix of the path (the parent is already held, or not: the
      // index must not care).
      const size_t from = path.empty() ? 0 : rng() % (path.size() + 1) / 2;
      e.block_hashes.assign(path.begin() + from, path.end());
      // Orders other than chain order (offload batches, replays) and repeated
      // hashes: runs inside the index must split and merge correctly anyway.
      const uint64_t order = rng() % 10;
      if (order == 0) std::reverse(e.block_hashes.begin(), e.block_hashes.end());
      if (order == 1) std::shuffle(e.block_hashes.begin(), e.block_hashes.end(), rng);
      if (order == 2 && !e.block_hashes.empty()) {
        e.block_hashes.push_back(e.block_hashes[rng() % e.block_hashes.size()]);
      }
    } else if (dice < 85) {
      e.kind = PlacementKind::kRemoved;
      const std::vector<uint64_t> path = forests[m].RandomPath(false);
      const uint64_t shape_of_removal = rng() % 3;
      if (shape_of_removal == 0) {
        for (uint64_t h : path) {
          if (rng() % 2) e.block_hashes.push_back(h);
        }
      } else if (!path.empty()) {
        // A contiguous range, in chain order or leaf-first (LRU eviction).
        const size_t lo = rng() % path.size();
        const size_t hi = lo + 1 + rng() % (path.size() - lo);
        e.block_hashes.assign(path.begin() + lo, path.begin() + hi);
        if (shape_of_removal == 2) std::reverse(e.block_hashes.begin(), e.block_hashes.end());
      }
      if (rng() % 10 == 0) e.block_hashes.push_back(rng());  // never stored
      if (shape.max_sources < kMaxSourcesPerModel && rng() % 3 == 0) {
        // Everything the source holds in the tier (from the oracle): often
        // its last entries, which free its source slot.
        e.block_hashes.clear();
        b.ForEachEntry([&](std::string_view mm, const SourceKey& s, Tier t, uint64_t h) {
          if (mm == e.model && s == e.source && t == e.tier) e.block_hashes.push_back(h);
        });
      }
    } else if (dice < 91) {
      e.kind = PlacementKind::kCleared;
      if (rng() % 4 == 0) e.model.clear();  // every model
    } else if (dice < 94) {
      e.kind = PlacementKind::kWorkerExpired;
    } else {
      e.kind = PlacementKind::kHeartbeat;
    }
    // Sometimes a message of several events: runs of clears (an agent's gap
    // or expiry, one clear per source; KvIndex clears a run in one pass per
    // model) among stores, which must land before or after them as ordered.
    std::vector<PlacementEvent> message = {e};
    if (exhaustion == nullptr && rng() % 20 == 0) {
      message.clear();
      const int n = 2 + static_cast<int>(rng() % 8);
      for (int k = 0; k < n; ++k) {
        PlacementEvent x;
        const int xm = static_cast<int>(rng() % shape.models);
        x.model = model_name(xm);
        x.source = {"w" + std::to_string(rng() % shape.workers),
                    static_cast<uint32_t>(rng() % shape.ranks)};
        x.tier = static_cast<Tier>(rng() % kNumTiers);
        x.block_size = 16;
        const uint64_t kind = rng() % 100;
        if (kind < 60) {
          x.kind = PlacementKind::kCleared;
          if (rng() % 3 == 0) x.model.clear();
        } else if (kind < 75) {
          x.kind = PlacementKind::kWorkerExpired;
        } else {
          x.kind = PlacementKind::kStored;
          x.block_hashes = forests[xm].RandomPath(true);
        }
        message.push_back(std::move(x));
      }
    }
    // Occasionally replay an old position: both must ignore it.
    const uint64_t at =
        (rng() % 20 == 0 && position > 0) ? position - rng() % position : ++position;
    std::ostringstream where;
    where << "seed " << seed << " step " << step << " (" << message.size() << " event(s), "
          << PlacementKindName(e.kind) << " " << e.model << " " << e.source.worker << "/"
          << e.source.dp_rank << " tier " << TierName(e.tier) << " n=" << e.block_hashes.size()
          << "): ";
    // Failures before removals too (they clear), where splits are rarer.
    if (exhaustion != nullptr && exhaustion->inject != nullptr &&
        rng() % (e.kind == PlacementKind::kRemoved ? 2 : 5) == 0 &&
        exhaustion->inject->BlockSize(e.model).has_value()) {
      exhaustion->inject->FailNodeAllocationsForTesting(e.model, static_cast<uint32_t>(rng() % 3),
                                                        static_cast<uint32_t>(1 + rng() % 3));
    }
    const ApplyResult result_a = a.ApplyMessage(message, at);
    // What `a` applied of the event, for the oracle.
    std::vector<PlacementEvent> applied = message;
    if (result_a.blocks_not_indexed != 0 || result_a.sources_cleared != 0) {
      if (exhaustion == nullptr) return where.str() + "unexpected " + result_a.status.ToString();
      if (result_a.status.code() != absl::StatusCode::kResourceExhausted) {
        return where.str() + "exhaustion reported as " + result_a.status.ToString();
      }
      if (e.kind == PlacementKind::kStored && result_a.sources_cleared == 0 &&
          result_a.blocks_not_indexed <= e.block_hashes.size()) {
        applied[0].block_hashes.resize(e.block_hashes.size() - result_a.blocks_not_indexed);
      } else if (e.kind == PlacementKind::kRemoved && result_a.sources_cleared == 1 &&
                 result_a.blocks_not_indexed == 0) {
        PlacementEvent clear;
        clear.kind = PlacementKind::kCleared;
        clear.model = e.model;
        clear.source = e.source;
        applied.push_back(clear);
      } else {
        return where.str() + "exhaustion does not fit the event: " + result_a.status.ToString();
      }
    } else if (!result_a.status.ok() && result_a.events_over_source_limit == 0) {
      return where.str() + "status without exhaustion: " + result_a.status.ToString();
    }
    const ApplyResult result_b = b.ApplyMessage(applied, at);
    // Past the source limit both refuse the same stored events: a source
    // holds a slot exactly while it holds an entry.
    if (result_a.events_over_source_limit != result_b.events_over_source_limit) {
      return where.str() +
             "source limit refusals differ: " + std::to_string(result_a.events_over_source_limit) +
             " vs " + std::to_string(result_b.events_over_source_limit);
    }
    if (exhaustion != nullptr && exhaustion->full != nullptr)
      exhaustion->full->ApplyMessage(message, at);
    if (result_a.applied != result_b.applied) return where.str() + "Apply result differs";
    // Blocks that left the index: the same ones, as often.
    const auto gone_a = departed_a.TakeDeparted(), gone_b = departed_b.TakeDeparted();
    if (gone_a != gone_b) {
      return where.str() + "departed blocks differ: " + std::to_string(gone_a.size()) + " vs " +
             std::to_string(gone_b.size());
    }
    departures += gone_a.size();
    // Stored blocks not taken: the same ones (the oracle has no memory
    // limits: there, what `a` reported).
    const auto left_a = departed_a.TakeNotIndexed(), left_b = departed_b.TakeNotIndexed();
    if (exhaustion == nullptr ? left_a != left_b
                              : left_a.size() != result_a.blocks_not_indexed &&
                                    result_a.events_over_source_limit == 0) {
      return where.str() + "blocks not indexed differ: " + std::to_string(left_a.size()) + " vs " +
             std::to_string(exhaustion == nullptr ? left_b.size() : result_a.blocks_not_indexed);
    }
    not_indexed += left_a.size();

    const IndexStats sa = a.Stats(), sb = b.Stats();
    if (sa.digest != sb.digest) return where.str() + "digest differs";
    if (sa.applied_seq != sb.applied_seq) return where.str() + "applied_seq differs";
    if (sa.sources != sb.sources) return where.str() + "sources differ";
    for (int t = 0; t < kNumTiers; ++t) {
      if (sa.entries[t] != sb.entries[t]) {
        return where.str() + "entries of tier " + std::string(TierName(static_cast<Tier>(t))) +
               " differ: " + std::to_string(sa.entries[t]) + " vs " + std::to_string(sb.entries[t]);
      }
    }
    if (a.Models() != b.Models()) return where.str() + "models differ";
    if (exhaustion != nullptr && exhaustion->full != nullptr && step % 10 == 0) {
      const std::set<EntryRow> rows_a = EntryRows(a), rows_full = EntryRows(*exhaustion->full);
      if (!std::includes(rows_full.begin(), rows_full.end(), rows_a.begin(), rows_a.end())) {
        return where.str() + "an entry that was never stored, or was removed (overcount)";
      }
    }
    for (int q = 0; q < 3; ++q) {
      const int qm = static_cast<int>(rng() % shape.models);
      std::vector<uint64_t> query = forests[qm].RandomPath(false);
      if (rng() % 5 == 0) query.push_back(rng());
      MatchOptions opts;
      if (rng() % 4 == 0) opts.max_blocks = static_cast<uint32_t>(rng() % 4);
      auto ra = a.MatchSequenceHashes(model_name(qm), query, opts);
      auto rb = b.MatchSequenceHashes(model_name(qm), query, opts);
      if (ra.ok() != rb.ok()) return where.str() + "match status differs";
      if (ra.ok() && *ra != *rb) {
        return where.str() + "match differs: " + Describe(*ra) + " vs " + Describe(*rb);
      }
    }
    if (step % 97 == 0) {
      auto sources_a = a.Sources(), sources_b = b.Sources();
      if (sources_a.size() != sources_b.size()) return where.str() + "Sources() differ";
      for (size_t i = 0; i < sources_a.size(); ++i) {
        if (sources_a[i].model != sources_b[i].model ||
            sources_a[i].source != sources_b[i].source ||
            !std::equal(sources_a[i].entries, sources_a[i].entries + kNumTiers,
                        sources_b[i].entries)) {
          return where.str() + "Sources() differ at " + std::to_string(i);
        }
      }
      if (EntryRows(a) != EntryRows(b)) return where.str() + "ForEachEntry differs";
      // A restore from the entries (the checkpoint seam) reproduces the state.
      KvIndexOptions restored_options;
      restored_options.max_sources_per_model = shape.max_sources;
      KvIndex restored(restored_options);
      a.ForEachEntry([&](std::string_view mm, const SourceKey& s, Tier t, uint64_t h) {
        restored.RestoreEntry(mm, s, t, h, 16);
      });
      restored.RestoreAppliedSeq(sa.applied_seq);
      if (restored.Stats().digest != sa.digest) return where.str() + "restored digest differs";
      for (int mm = 0; mm < shape.models; ++mm) {
        const std::vector<uint64_t> query = forests[mm].RandomPath(false);
        auto ra = a.MatchSequenceHashes(model_name(mm), query);
        auto rr = restored.MatchSequenceHashes(model_name(mm), query);
        if (ra.ok() && rr.ok() && ra->workers != rr->workers) {
          return where.str() + "restored match differs";
        }
      }
    }
  }
  if (departures == 0) return "seed " + std::to_string(seed) + ": no block ever left the index";
  // Under limits, the observer heard of what was left out.
  if ((exhaustion != nullptr || shape.max_sources < kMaxSourcesPerModel) && not_indexed == 0) {
    return "seed " + std::to_string(seed) + ": no stored block reported not indexed";
  }
  return std::nullopt;
}

std::optional<uint64_t> EnvU64(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::strtoull(v, nullptr, 10);
}

TEST(DifferentialTest, MatchesOracleOnRandomStreams) {
  std::vector<uint64_t> seeds = {1, 2, 3, 4, 5, 6};
  if (auto seed = EnvU64("KVINDEX_SEED")) seeds = {*seed};
  for (uint64_t seed : seeds) {
    StreamShape shape;
    // Sources span one, three or two 64-source holder groups.
    if (seed % 3 == 1) shape.workers = 50;
    if (seed % 3 == 2) shape.workers = 30;
    if (auto steps = EnvU64("KVINDEX_STEPS")) shape.steps = static_cast<int>(*steps);
    KvIndex index;
    ReferenceIndex oracle;
    const std::optional<std::string> failure = RunStream(index, oracle, seed, shape);
    EXPECT_FALSE(failure.has_value())
        << *failure << "\nreplay: KVINDEX_SEED=" << seed << " kvindex_index_differential_test";
  }
}

TEST(DifferentialTest, MatchesOracleUnderInjectedAllocationFailures) {
  std::vector<uint64_t> seeds = {11, 12, 13};
  if (auto seed = EnvU64("KVINDEX_SEED")) seeds = {*seed};
  uint64_t cut_short = 0, cleared = 0;
  for (uint64_t seed : seeds) {
    StreamShape shape;
    if (seed % 3 == 1) shape.workers = 50;
    if (auto steps = EnvU64("KVINDEX_STEPS")) shape.steps = static_cast<int>(*steps);
    KvIndex index;
    ReferenceIndex oracle, full;
    const Exhaustion exhaustion{&index, &full};
    const std::optional<std::string> failure = RunStream(index, oracle, seed, shape, &exhaustion);
    EXPECT_FALSE(failure.has_value()) << *failure << "\nreplay: KVINDEX_SEED=" << seed;
    cut_short += index.Stats().blocks_not_indexed;
    cleared += index.Stats().sources_cleared_on_exhaustion;
  }
  // Both paths were taken: stores cut short and removals that cleared.
  EXPECT_GT(cut_short, 0u);
  EXPECT_GT(cleared, 0u);
}

TEST(DifferentialTest, MatchesOracleUnderATightMemoryCap) {
  std::vector<uint64_t> seeds = {21, 22};
  if (auto seed = EnvU64("KVINDEX_SEED")) seeds = {*seed};
  for (uint64_t seed : seeds) {
    StreamShape shape;
    shape.extend = 40;
    if (auto steps = EnvU64("KVINDEX_STEPS")) shape.steps = static_cast<int>(*steps);
    // New entries get one node chunk and the first 8 KiB locator (665
    // blocks); removals get one more chunk.
    KvIndexOptions options;
    options.max_model_bytes = (size_t{4} << 20) + (size_t{8} << 10);
    KvIndex index(options);
    ReferenceIndex oracle, full;
    const Exhaustion exhaustion{nullptr, &full};
    const std::optional<std::string> failure = RunStream(index, oracle, seed, shape, &exhaustion);
    EXPECT_FALSE(failure.has_value()) << *failure << "\nreplay: KVINDEX_SEED=" << seed;
    EXPECT_GT(index.Stats().blocks_not_indexed, 0u) << seed;
  }
}

// Few source slots per model for the stream's 150 sources: stores, removals
// and clears keep taking and freeing them, and KvIndex must refuse exactly
// the stores the oracle refuses (a source holds a slot while it holds an
// entry; the old index kept the id of a source emptied by removals).
TEST(DifferentialTest, MatchesOracleAtASourceLimit) {
  std::vector<uint64_t> seeds = {31, 32, 33};
  if (auto seed = EnvU64("KVINDEX_SEED")) seeds = {*seed};
  for (uint64_t seed : seeds) {
    StreamShape shape;
    shape.workers = 50;
    shape.max_sources = 24;
    if (auto steps = EnvU64("KVINDEX_STEPS")) shape.steps = static_cast<int>(*steps);
    KvIndexOptions options;
    options.max_sources_per_model = shape.max_sources;
    KvIndex index(options);
    ReferenceIndex oracle(shape.max_sources);
    const std::optional<std::string> failure = RunStream(index, oracle, seed, shape);
    EXPECT_FALSE(failure.has_value()) << *failure << "\nreplay: KVINDEX_SEED=" << seed;
    EXPECT_GT(index.Stats().events_over_source_limit, 0u) << seed;
  }
}

// An index that ignores removals, to prove the harness notices.
class DropsRemovals : public ReferenceIndex {
 protected:
  void Erase(Model&, const Entry&) override {}
};

TEST(DifferentialTest, SelfTestCatchesAnIndexThatIgnoresRemovals) {
  DropsRemovals broken;
  KvIndex index;
  StreamShape shape;
  shape.steps = 500;
  const std::optional<std::string> failure = RunStream(index, broken, 7, shape);
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find("differ"), std::string::npos) << *failure;
}

}  // namespace
}  // namespace kvindex::index
