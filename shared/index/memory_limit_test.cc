// Memory limits of KvIndex (KvIndexOptions): stores past the per-model cap or
// the arena's hard limit are cut short and reported, removals and clears
// always proceed, a removal that cannot split clears its source, and the
// state always equals the oracle given exactly what KvIndex reports it
// indexed (never an entry it was not given).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"

namespace kvindex::index {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

PlacementEvent Event(PlacementKind kind, std::string worker, std::vector<uint64_t> hashes,
                     std::string model = "m") {
  PlacementEvent e;
  e.kind = kind;
  e.model = std::move(model);
  e.source = {std::move(worker), 0};
  e.tier = Tier::kDevice;
  e.block_size = 16;
  e.block_hashes = std::move(hashes);
  return e;
}

// `count` hashes no other chain shares, from `first`. Multiples of the
// locator's own multiplier: their home slots cluster, so probe runs overflow
// far below the maximum load and stores also take the rebuild inside
// AppendNew (refused at the cap like any growth).
std::vector<uint64_t> Chain(uint64_t first, size_t count) {
  std::vector<uint64_t> hashes(count);
  for (size_t i = 0; i < count; ++i) hashes[i] = (first + i) * 0x9E3779B97F4A7C15ull | 1;
  return hashes;
}

// KvIndex next to the oracle, which is given what KvIndex reports it applied.
class Pair {
 public:
  explicit Pair(const KvIndexOptions& options) : index_(options) {}

  ApplyResult Apply(const PlacementEvent& e) {
    const ApplyResult result = index_.Apply(e, ++position_);
    std::vector<PlacementEvent> applied = {e};
    if (e.kind == PlacementKind::kStored) {
      applied[0].block_hashes.resize(e.block_hashes.size() - result.blocks_not_indexed);
    }
    if (result.sources_cleared != 0) {
      applied.push_back(Event(PlacementKind::kCleared, e.source.worker, {}, e.model));
    }
    oracle_.ApplyMessage(applied, position_);
    not_indexed_ += result.blocks_not_indexed;
    return result;
  }

  // Digest, counts, sources, entries and matches equal the oracle's.
  void ExpectConsistent(const std::vector<std::vector<uint64_t>>& queries) const {
    const IndexStats a = index_.Stats(), b = oracle_.Stats();
    EXPECT_EQ(a.digest, b.digest);
    EXPECT_EQ(a.sources, b.sources);
    for (int t = 0; t < kNumTiers; ++t) EXPECT_EQ(a.entries[t], b.entries[t]) << t;
    EXPECT_EQ(a.blocks_not_indexed, not_indexed_);
    EXPECT_EQ(EntryRows(index_), EntryRows(oracle_));
    for (const std::vector<uint64_t>& q : queries) {
      auto ra = index_.MatchSequenceHashes("m", q);
      auto rb = oracle_.MatchSequenceHashes("m", q);
      ASSERT_TRUE(ra.ok() && rb.ok());
      EXPECT_EQ(ra->workers, rb->workers);
    }
  }

  KvIndex& index() { return index_; }
  const ReferenceIndex& oracle() const { return oracle_; }

 private:
  KvIndex index_;
  ReferenceIndex oracle_;
  uint64_t position_ = 0;
  uint64_t not_indexed_ = 0;
};

TEST(MemoryLimitTest, StoresPastTheCapAreCutShortAndReported) {
  KvIndexOptions options;
  options.max_model_bytes = 8 * kMiB;
  Pair pair(options);
  std::vector<std::vector<uint64_t>> chains;
  bool reported = false, refused_whole = false;
  for (size_t i = 0; i < 400 && !refused_whole; ++i) {
    chains.push_back(Chain(i * 10000, 5000));
    const ApplyResult r =
        pair.Apply(Event(PlacementKind::kStored, "w" + std::to_string(i % 5), chains.back()));
    ASSERT_TRUE(r.applied);
    if (r.blocks_not_indexed == 0) {
      ASSERT_TRUE(r.status.ok()) << r.status;
      continue;
    }
    // The first refusals may be partial (the event's head fits); once the
    // memory for new entries is used up, whole events are refused.
    refused_whole = r.blocks_not_indexed == 5000;
    EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
    if (reported) continue;
    reported = true;
    EXPECT_NE(r.status.message().find("model 'm'"), std::string::npos) << r.status;
    EXPECT_NE(r.status.message().find("max_model_bytes 8388608"), std::string::npos) << r.status;
    EXPECT_NE(r.status.message().find(std::to_string(r.blocks_not_indexed) + " stored blocks"),
              std::string::npos)
        << r.status;
  }
  ASSERT_TRUE(refused_whole) << "the cap was never reached";
  // Blocks already held by another source still take a holder (whole
  // nodes: no new memory).
  const ApplyResult r = pair.Apply(Event(PlacementKind::kStored, "late", chains[0]));
  EXPECT_TRUE(r.status.ok()) << r.status;
  // The cap holds: node arena + locator, plus small per-model tables.
  EXPECT_LE(pair.index().Stats().bytes_allocated, options.max_model_bytes + kMiB);
  pair.ExpectConsistent(chains);
}

TEST(MemoryLimitTest, RemovalsAndClearsProceedPastTheCapAndFreeRoom) {
  KvIndexOptions options;
  options.max_model_bytes = 8 * kMiB;
  Pair pair(options);
  std::vector<std::vector<uint64_t>> chains;
  for (size_t i = 0; i < 400; ++i) {
    chains.push_back(Chain(i * 10000, 5000));
    if (pair.Apply(Event(PlacementKind::kStored, "w" + std::to_string(i % 4), chains.back()))
            .blocks_not_indexed != 0) {
      break;
    }
  }
  // A second holder on parts of every chain: splits, held to the cap for
  // new entries (they may be cut short, never half-written).
  for (size_t i = 0; i < chains.size(); ++i) {
    const std::vector<uint64_t> part(chains[i].begin() + 1000, chains[i].begin() + 2000);
    pair.Apply(Event(PlacementKind::kStored, "second", part));
  }
  pair.ExpectConsistent(chains);
  // Removals in the middle of nodes (splits) all proceed past the cap.
  for (size_t i = 0; i < chains.size(); ++i) {
    const std::vector<uint64_t> middle(chains[i].begin() + 1500, chains[i].begin() + 1600);
    const ApplyResult r =
        pair.Apply(Event(PlacementKind::kRemoved, "w" + std::to_string(i % 4), middle));
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.sources_cleared, 0u);
    const ApplyResult r2 = pair.Apply(Event(PlacementKind::kRemoved, "second", middle));
    EXPECT_TRUE(r2.status.ok()) << r2.status;
  }
  pair.ExpectConsistent(chains);
  EXPECT_EQ(pair.index().Stats().sources_cleared_on_exhaustion, 0u);
  // Clears and expiries proceed, and the memory they free takes new blocks.
  for (int w = 0; w < 4; ++w) {
    EXPECT_TRUE(
        pair.Apply(Event(PlacementKind::kCleared, "w" + std::to_string(w), {})).status.ok());
  }
  EXPECT_TRUE(pair.Apply(Event(PlacementKind::kWorkerExpired, "second", {})).status.ok());
  const ApplyResult again = pair.Apply(Event(PlacementKind::kStored, "w0", chains[0]));
  EXPECT_TRUE(again.status.ok()) << again.status;
  pair.ExpectConsistent(chains);
}

TEST(MemoryLimitTest, RemovalThatCannotSplitClearsItsSourceFromTheModel) {
  Pair pair(KvIndexOptions{});
  const std::vector<uint64_t> shared = Chain(1, 10), alone = Chain(100, 10);
  pair.Apply(Event(PlacementKind::kStored, "a", shared));
  pair.Apply(Event(PlacementKind::kStored, "b", shared));
  pair.Apply(Event(PlacementKind::kStored, "a", alone));
  pair.Apply(Event(PlacementKind::kStored, "a", shared, "other"));
  // Removing a's middle of `shared` needs two copies (the middle and the
  // prefix): the second cannot be allocated. Nothing may be half-split.
  pair.index().FailNodeAllocationsForTesting("m", /*skip=*/1, /*n=*/1);
  const std::vector<uint64_t> middle(shared.begin() + 3, shared.begin() + 6);
  ApplyResult r = pair.Apply(Event(PlacementKind::kRemoved, "a", middle));
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.sources_cleared, 1u);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status.message().find("1 sources cleared"), std::string::npos) << r.status;
  // a holds nothing in "m" (not even `alone`), b keeps everything, and a
  // keeps what it holds in another model.
  for (const auto& [model, source, tier, hash] : EntryRows(pair.index())) {
    EXPECT_FALSE(model == "m" && source.worker == "a") << hash;
  }
  auto match = pair.index().MatchSequenceHashes("m", shared);
  ASSERT_TRUE(match.ok());
  ASSERT_EQ(match->workers.size(), 1u);
  EXPECT_EQ(match->workers[0].source.worker, "b");
  EXPECT_EQ(match->workers[0].longest, 10u);
  match = pair.index().MatchSequenceHashes("other", shared);
  ASSERT_TRUE(match.ok());
  EXPECT_EQ(match->workers.size(), 1u);
  EXPECT_EQ(pair.index().Stats().sources_cleared_on_exhaustion, 1u);
  pair.ExpectConsistent({shared, alone});

  // The only holder: cutting out a middle copies the shorter remainder.
  pair.Apply(Event(PlacementKind::kStored, "c", alone));
  pair.index().FailNodeAllocationsForTesting("m", 0, 1);
  r = pair.Apply(Event(PlacementKind::kRemoved, "c", {alone[4], alone[5]}));
  EXPECT_EQ(r.sources_cleared, 1u);
  EXPECT_TRUE(pair.index().MatchSequenceHashes("m", alone)->workers.empty());
  EXPECT_EQ(pair.index().Stats().sources_cleared_on_exhaustion, 2u);
  pair.ExpectConsistent({shared, alone});
}

TEST(MemoryLimitTest, AHolderThatCannotSplitIsLeftOutNotHalfAdded) {
  Pair pair(KvIndexOptions{});
  const std::vector<uint64_t> chain = Chain(1, 20);
  pair.Apply(Event(PlacementKind::kStored, "a", chain));
  // b's store takes the middle (two copies; the second fails), then would
  // append new blocks: the event stops at its first block.
  pair.index().FailNodeAllocationsForTesting("m", 1, 1);
  std::vector<uint64_t> event(chain.begin() + 5, chain.begin() + 10);
  const std::vector<uint64_t> fresh = Chain(1000, 4);
  event.insert(event.end(), fresh.begin(), fresh.end());
  const ApplyResult r = pair.Apply(Event(PlacementKind::kStored, "b", event));
  EXPECT_EQ(r.blocks_not_indexed, event.size());
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  pair.ExpectConsistent({chain, event});
  // With memory back, the same store is indexed in full; a half-done split
  // would now show as a's blocks in two nodes, which its clear counts twice.
  EXPECT_TRUE(pair.Apply(Event(PlacementKind::kStored, "b", event)).status.ok());
  pair.ExpectConsistent({chain, event});
  EXPECT_TRUE(pair.Apply(Event(PlacementKind::kCleared, "a", {})).status.ok());
  pair.ExpectConsistent({chain, event});
}

TEST(MemoryLimitTest, TheHardLimitIsAValueNotAnException) {
  // Three chunks: new entries stop at two, the third is left to removals.
  KvIndexOptions options;
  options.max_arena_chunks = 3;
  Pair pair(options);
  std::vector<std::vector<uint64_t>> chains;
  uint64_t not_indexed = 0;
  for (size_t i = 0; i < 40; ++i) {
    chains.push_back(Chain(i * 100000, 40000));
    const ApplyResult r =
        pair.Apply(Event(PlacementKind::kStored, "w" + std::to_string(i % 3), chains.back()));
    not_indexed += r.blocks_not_indexed;
    if (r.blocks_not_indexed != 0) {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
      EXPECT_NE(r.status.message().find("hard limit of 3 node arena chunks"), std::string::npos)
          << r.status;
    }
  }
  ASSERT_GT(not_indexed, 0u);
  // Two chunks of 8-byte hashes (less headers and size-class rounding):
  // fewer than 2 x 262,144 blocks.
  uint64_t held = 0;
  for (uint64_t n : pair.index().Stats().entries) held += n;
  EXPECT_GT(held, 400000u);
  EXPECT_LT(held, 2 * 262144u);
  const std::vector<std::vector<uint64_t>> queries = {chains[0], chains[12], chains.back()};
  pair.ExpectConsistent(queries);
  // Removals that split nodes use the reserved chunk.
  for (size_t i = 0; i < chains.size(); ++i) {
    const std::vector<uint64_t> middle(chains[i].begin() + 100, chains[i].begin() + 110);
    const ApplyResult r =
        pair.Apply(Event(PlacementKind::kRemoved, "w" + std::to_string(i % 3), middle));
    EXPECT_TRUE(r.status.ok()) << r.status;
  }
  pair.ExpectConsistent(queries);
}

TEST(MemoryLimitTest, ArenaWithoutRoomForNewEntriesIndexesNothing) {
  KvIndexOptions options;
  options.max_arena_chunks = 1;  // all of it reserved for removals
  Pair pair(options);
  const ApplyResult r = pair.Apply(Event(PlacementKind::kStored, "a", Chain(1, 10)));
  EXPECT_EQ(r.blocks_not_indexed, 10u);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pair.index().Models(), std::vector<std::string>{"m"});
  pair.ExpectConsistent({Chain(1, 10)});
}

}  // namespace
}  // namespace kvindex::index
