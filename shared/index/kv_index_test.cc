// Section 5 and 6 rules of semantics.md, checked on both KvIndex and the
// ReferenceIndex oracle (typed tests), plus KvIndex-specific accounting.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"
#include "shared/index/testing/events.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvindex::index {
namespace {

using testing::Cleared;
using testing::Expired;
using testing::Removed;
using testing::Stored;

template <typename T>
class IndexRulesTest : public ::testing::Test {
 protected:
  void Apply(const PlacementEvent& e) {
    const ApplyResult result = index_.Apply(e, ++seq_);
    ASSERT_TRUE(result.applied);
    ASSERT_TRUE(result.status.ok()) << result.status;
  }
  MatchResult Match(std::vector<uint64_t> hashes, const MatchOptions& opts = {}) {
    auto r = index_.MatchSequenceHashes("m", hashes, opts);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : MatchResult{};
  }
  T index_;
  uint64_t seq_ = 0;
};

using Implementations = ::testing::Types<KvIndex, ReferenceIndex>;
TYPED_TEST_SUITE(IndexRulesTest, Implementations);

TYPED_TEST(IndexRulesTest, UnknownModelIsNotFound) {
  std::vector<uint64_t> q = {1};
  EXPECT_EQ(this->index_.MatchSequenceHashes("nope", q).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(this->index_.BlockSize("nope").has_value());
}

TYPED_TEST(IndexRulesTest, LongestStopsAtFirstMissingBlock) {
  this->Apply(Stored("a", Tier::kDevice, {1, 2, 4}));
  MatchResult r = this->Match({1, 2, 3, 4});
  EXPECT_EQ(r.blocks, 4u);
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].longest, 2u);
  EXPECT_EQ(r.workers[0].device, 2u);
  EXPECT_EQ(r.workers[0].device_prefix, 2u);
  EXPECT_EQ(r.applied_seq, 1u);
}

TYPED_TEST(IndexRulesTest, EachBlockCountsInItsFastestTier) {
  this->Apply(Stored("a", Tier::kExternal, {1, 2, 3, 4, 5}));
  this->Apply(Stored("a", Tier::kDisk, {1, 2, 3, 4}));
  this->Apply(Stored("a", Tier::kHost, {1, 2, 3}));
  this->Apply(Stored("a", Tier::kDevice, {1, 2}));
  MatchResult r = this->Match({1, 2, 3, 4, 5, 6});
  ASSERT_EQ(r.workers.size(), 1u);
  const WorkerMatch& w = r.workers[0];
  EXPECT_EQ(w.longest, 5u);
  EXPECT_EQ(w.device, 2u);
  EXPECT_EQ(w.host, 1u);
  EXPECT_EQ(w.disk, 1u);
  EXPECT_EQ(w.external, 1u);
  EXPECT_EQ(w.device + w.host + w.disk + w.external, w.longest);
  EXPECT_EQ(w.device_prefix, 2u);
}

TYPED_TEST(IndexRulesTest, DevicePrefixEndsAtFirstNonDeviceBlock) {
  this->Apply(Stored("a", Tier::kDevice, {1, 3, 4}));
  this->Apply(Stored("a", Tier::kHost, {2}));
  MatchResult r = this->Match({1, 2, 3, 4});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].longest, 4u);
  EXPECT_EQ(r.workers[0].device, 3u);
  EXPECT_EQ(r.workers[0].host, 1u);
  EXPECT_EQ(r.workers[0].device_prefix, 1u);
}

TYPED_TEST(IndexRulesTest, DevicePrefixZeroWhenFirstBlockNotOnDevice) {
  this->Apply(Stored("a", Tier::kDisk, {1, 2}));
  MatchResult r = this->Match({1, 2});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].longest, 2u);
  EXPECT_EQ(r.workers[0].disk, 2u);
  EXPECT_EQ(r.workers[0].device_prefix, 0u);
}

TYPED_TEST(IndexRulesTest, SourcesWithoutTheFirstBlockAreOmitted) {
  this->Apply(Stored("a", Tier::kDevice, {2, 3}));
  this->Apply(Stored("b", Tier::kDevice, {1}));
  MatchResult r = this->Match({1, 2, 3});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].source.worker, "b");
}

TYPED_TEST(IndexRulesTest, OrderIsLongestDescThenWorkerThenRank) {
  this->Apply(Stored("b", Tier::kDevice, {1, 2}, 1));
  this->Apply(Stored("b", Tier::kDevice, {1, 2}, 0));
  this->Apply(Stored("a", Tier::kHost, {1, 2}, 3));
  this->Apply(Stored("c", Tier::kDevice, {1, 2, 3}));
  this->Apply(Stored("d", Tier::kDevice, {1}));
  MatchResult r = this->Match({1, 2, 3});
  std::vector<std::pair<std::string, uint32_t>> order;
  for (const auto& w : r.workers) order.emplace_back(w.source.worker, w.source.dp_rank);
  const std::vector<std::pair<std::string, uint32_t>> want = {
      {"c", 0}, {"a", 3}, {"b", 0}, {"b", 1}, {"d", 0}};
  EXPECT_EQ(order, want);
}

TYPED_TEST(IndexRulesTest, MaxBlocksTruncatesTheQuery) {
  this->Apply(Stored("a", Tier::kDevice, {1, 2, 3}));
  MatchOptions opts;
  opts.max_blocks = 2;
  MatchResult r = this->Match({1, 2, 3}, opts);
  EXPECT_EQ(r.blocks, 3u);
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].longest, 2u);
}

TYPED_TEST(IndexRulesTest, RemovedErasesOnlyThatTier) {
  this->Apply(Stored("a", Tier::kDevice, {1, 2}));
  this->Apply(Stored("a", Tier::kHost, {1, 2}));
  this->Apply(Removed("a", Tier::kDevice, {1}));
  MatchResult r = this->Match({1, 2});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].host, 1u);
  EXPECT_EQ(r.workers[0].device, 1u);
  EXPECT_EQ(r.workers[0].device_prefix, 0u);
  IndexStats s = this->index_.Stats();
  EXPECT_EQ(s.entries[0], 1u);
  EXPECT_EQ(s.entries[1], 2u);
}

TYPED_TEST(IndexRulesTest, SetSemanticsKeepDigestStable) {
  this->Apply(Stored("a", Tier::kDevice, {1, 2}));
  const IndexStats before = this->index_.Stats();
  this->Apply(Stored("a", Tier::kDevice, {1, 2}));  // duplicate announcement
  this->Apply(Removed("a", Tier::kHost, {1}));      // missing entry
  this->Apply(Removed("zz", Tier::kDevice, {1}));   // unknown source
  const IndexStats after = this->index_.Stats();
  EXPECT_EQ(before.digest, after.digest);
  EXPECT_EQ(after.entries[0], 2u);
  EXPECT_EQ(after.sources, 1u);
}

TYPED_TEST(IndexRulesTest, ClearedErasesEveryTierOfThatSourceOnly) {
  this->Apply(Stored("a", Tier::kDevice, {1}));
  this->Apply(Stored("a", Tier::kDisk, {1, 2}));
  this->Apply(Stored("a", Tier::kDevice, {1}, 1));
  this->Apply(Stored("b", Tier::kHost, {1}));
  this->Apply(Cleared("a"));
  MatchResult r = this->Match({1, 2});
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].source, (SourceKey{"a", 1}));
  EXPECT_EQ(r.workers[1].source, (SourceKey{"b", 0}));
  IndexStats s = this->index_.Stats();
  EXPECT_EQ(s.entries[0], 1u);
  EXPECT_EQ(s.entries[1], 1u);
  EXPECT_EQ(s.entries[2], 0u);
  EXPECT_EQ(s.sources, 2u);
  // The cleared source can come back.
  this->Apply(Stored("a", Tier::kHost, {1}));
  EXPECT_EQ(this->index_.Stats().sources, 3u);
}

TYPED_TEST(IndexRulesTest, WorkerExpiredRemovesEveryRankInEveryModel) {
  this->Apply(Stored("a", Tier::kDevice, {1}, 0));
  this->Apply(Stored("a", Tier::kDevice, {1}, 7));
  this->Apply(Stored("a", Tier::kHost, {1}, 0, "other"));
  this->Apply(Stored("ab", Tier::kDevice, {1}));
  this->Apply(Expired("a"));
  MatchResult r = this->Match({1});
  ASSERT_EQ(r.workers.size(), 1u);
  EXPECT_EQ(r.workers[0].source.worker, "ab");
  std::vector<uint64_t> q = {1};
  auto other = this->index_.MatchSequenceHashes("other", q);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->workers.empty());
  EXPECT_EQ(this->index_.Stats().sources, 1u);
}

TYPED_TEST(IndexRulesTest, ReplayedPositionsAreIgnored) {
  ASSERT_TRUE(this->index_.Apply(Stored("a", Tier::kDevice, {1}), 5).applied);
  EXPECT_FALSE(this->index_.Apply(Removed("a", Tier::kDevice, {1}), 5).applied);
  EXPECT_FALSE(this->index_.Apply(Removed("a", Tier::kDevice, {1}), 3).applied);
  EXPECT_EQ(this->index_.Stats().entries[0], 1u);
  PlacementEvent hb;
  hb.kind = PlacementKind::kHeartbeat;
  ASSERT_TRUE(this->index_.Apply(hb, 9).applied);
  EXPECT_EQ(this->index_.Stats().applied_seq, 9u);
}

TYPED_TEST(IndexRulesTest, DigestMatchesSpecForOneEntry) {
  this->Apply(Stored("w1", Tier::kHost, {0x0102030405060708ull}, 3));
  std::string key = std::string("m") + '\0' + "w1" + '\0';
  key += std::string("\x03\x00\x00\x00", 4);
  key += '\x01';
  key += std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8);
  EXPECT_EQ(this->index_.Stats().digest, XXH3_64bits_withSeed(key.data(), key.size(), 0));
}

TYPED_TEST(IndexRulesTest, DigestIsOrderIndependent) {
  TypeParam other;
  uint64_t s = 0;
  this->Apply(Stored("a", Tier::kDevice, {1, 2, 3}));
  this->Apply(Stored("b", Tier::kHost, {1, 9}, 2));
  this->Apply(Removed("a", Tier::kDevice, {2}));
  other.Apply(Stored("b", Tier::kHost, {9}, 2), ++s);
  other.Apply(Stored("a", Tier::kDevice, {3}), ++s);
  other.Apply(Stored("a", Tier::kDevice, {2, 1}), ++s);
  other.Apply(Stored("b", Tier::kHost, {1}, 2), ++s);
  other.Apply(Removed("a", Tier::kDevice, {2}), ++s);
  EXPECT_EQ(this->index_.Stats().digest, other.Stats().digest);
  EXPECT_NE(this->index_.Stats().digest, 0u);
}

TYPED_TEST(IndexRulesTest, MatchTokensUsesBlockSizeLoraAndSalt) {
  // semantics.md section 2 test vectors.
  const uint64_t seq1 = 4945711292740353085ull;
  const uint64_t lora_local = 15671544057904749233ull;
  this->Apply(Stored("a", Tier::kDevice, {14643705804678351452ull, seq1}));
  this->Apply(Stored("b", Tier::kDevice, {lora_local}));
  std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto r = this->index_.MatchTokens("m", tokens, "", "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->blocks, 2u);
  ASSERT_EQ(r->workers.size(), 1u);
  EXPECT_EQ(r->workers[0].longest, 2u);
  auto lora = this->index_.MatchTokens("m", tokens, "my-lora", "");
  ASSERT_TRUE(lora.ok());
  ASSERT_EQ(lora->workers.size(), 1u);
  EXPECT_EQ(lora->workers[0].source.worker, "b");
  auto salted = this->index_.MatchTokens("m", tokens, "", "salt");
  ASSERT_TRUE(salted.ok());
  EXPECT_TRUE(salted->workers.empty());
  std::vector<uint64_t> locals = {14643705804678351452ull, 16777012769546811212ull};
  auto by_local = this->index_.MatchLocalHashes("m", locals);
  ASSERT_TRUE(by_local.ok());
  ASSERT_EQ(by_local->workers.size(), 1u);
  EXPECT_EQ(by_local->workers[0].longest, 2u);
  EXPECT_EQ(this->index_.BlockSize("m"), 4u);
}

TYPED_TEST(IndexRulesTest, ManySourcesAcrossHolderGroups) {
  // 300 sources span five 64-source holder groups.
  for (uint32_t i = 0; i < 300; ++i) {
    std::vector<uint64_t> chain;
    for (uint32_t k = 0; k <= i % 7; ++k) chain.push_back(100 + k);
    this->Apply(Stored("w" + std::to_string(i), static_cast<Tier>(i % 4), chain, i % 3));
  }
  MatchResult r = this->Match({100, 101, 102, 103, 104, 105, 106, 107});
  ASSERT_EQ(r.workers.size(), 300u);
  for (const WorkerMatch& w : r.workers) {
    const uint32_t i = static_cast<uint32_t>(std::stoul(w.source.worker.substr(1)));
    EXPECT_EQ(w.longest, i % 7 + 1);
    EXPECT_EQ(w.source.dp_rank, i % 3);
    EXPECT_EQ(w.device_prefix, i % 4 == 0 ? w.longest : 0u);
  }
  this->Apply(Expired("w150"));
  EXPECT_EQ(this->Match({100}).workers.size(), 299u);
}

// Runs longer than one chain node (4,096 blocks), then holders added and
// removed on parts of them, in chain order and leaf-first.
TYPED_TEST(IndexRulesTest, LongChainsSplitAndRejoinExactly) {
  std::vector<uint64_t> chain(10000);
  std::iota(chain.begin(), chain.end(), uint64_t{1000});
  this->Apply(Stored("a", Tier::kDevice, chain));
  this->Apply(Stored("b", Tier::kHost, std::vector<uint64_t>(chain.begin(), chain.begin() + 5000)));
  std::vector<uint64_t> tail(chain.begin() + 3000, chain.begin() + 7000);
  std::reverse(tail.begin(), tail.end());
  this->Apply(Removed("a", Tier::kDevice, tail));  // leaf-first
  MatchResult r = this->Match(chain);
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].source.worker, "b");
  EXPECT_EQ(r.workers[0].longest, 5000u);
  EXPECT_EQ(r.workers[0].host, 5000u);
  EXPECT_EQ(r.workers[0].device, 0u);
  EXPECT_EQ(r.workers[1].source.worker, "a");
  EXPECT_EQ(r.workers[1].longest, 3000u);
  EXPECT_EQ(r.workers[1].device_prefix, 3000u);
  // Put the middle back in reverse order: one run again for a.
  this->Apply(Stored("a", Tier::kDevice, tail));
  r = this->Match(chain);
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].source.worker, "a");
  EXPECT_EQ(r.workers[0].longest, 10000u);
  EXPECT_EQ(r.workers[0].device, 10000u);
  EXPECT_EQ(r.workers[1].longest, 5000u);
  EXPECT_EQ(r.workers[1].host, 5000u);
  // A query that starts in the middle of a run.
  r = this->Match(std::vector<uint64_t>(chain.begin() + 4500, chain.begin() + 4600));
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].longest, 100u);
  EXPECT_EQ(r.workers[1].longest, 100u);
  const IndexStats stats = this->index_.Stats();
  EXPECT_EQ(stats.entries[0], 10000u);
  EXPECT_EQ(stats.entries[1], 5000u);
}

// Duplicate hashes inside one event and events in shuffled order change
// nothing but the set they name.
TYPED_TEST(IndexRulesTest, RepeatedAndUnorderedHashesAreASet) {
  this->Apply(Stored("a", Tier::kDevice, {5, 6, 7, 6, 5, 8}));
  this->Apply(Stored("b", Tier::kDevice, {8, 6, 5, 7}));
  MatchResult r = this->Match({5, 6, 7, 8});
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].longest, 4u);
  EXPECT_EQ(r.workers[1].longest, 4u);
  this->Apply(Removed("a", Tier::kDevice, {7, 7, 6}));
  r = this->Match({5, 6, 7, 8});
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].source.worker, "b");
  EXPECT_EQ(r.workers[0].longest, 4u);
  EXPECT_EQ(r.workers[1].longest, 1u);
  EXPECT_EQ(this->index_.Stats().entries[0], 6u);
}

// Rows are ordered by longest, then worker, then dp_rank, for few and for
// many distinct lengths (the index orders them two different ways).
TYPED_TEST(IndexRulesTest, RowsOrderedForFewAndManyDistinctLengths) {
  for (uint32_t distinct : {3u, 20u}) {
    TypeParam index;
    uint64_t seq = 0;
    std::vector<uint64_t> chain(40);
    std::iota(chain.begin(), chain.end(), uint64_t{7000} + distinct * 100);
    for (uint32_t i = 0; i < 40; ++i) {
      const std::string worker = "w" + std::to_string((i * 7) % 40);
      const uint32_t length = 1 + i % distinct;
      ASSERT_TRUE(
          index
              .Apply(Stored(worker, Tier::kDevice,
                            std::vector<uint64_t>(chain.begin(), chain.begin() + length), i % 2),
                     ++seq)
              .applied);
    }
    auto r = index.MatchSequenceHashes("m", chain);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->workers.size(), 40u);
    std::vector<WorkerMatch> sorted = r->workers;
    SortWorkerMatches(&sorted);
    EXPECT_EQ(r->workers, sorted) << distinct << " distinct lengths";
    EXPECT_EQ(r->workers.front().longest, distinct);
  }
}

TYPED_TEST(IndexRulesTest, CheckpointRoundTripKeepsDigest) {
  this->Apply(Stored("a", Tier::kDevice, {1, 2, 3}));
  this->Apply(Stored("b", Tier::kExternal, {1, 5}, 4, "z"));
  TypeParam restored;
  this->index_.ForEachEntry([&](std::string_view model, const SourceKey& s, Tier t, uint64_t h) {
    restored.RestoreEntry(model, s, t, h, 4);
  });
  restored.RestoreAppliedSeq(this->seq_);
  const IndexStats a = this->index_.Stats(), b = restored.Stats();
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.applied_seq, b.applied_seq);
  EXPECT_EQ(restored.Models(), (std::vector<std::string>{"m", "z"}));
  auto sources = restored.Sources();
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].entries[0], 3u);
  EXPECT_EQ(sources[1].entries[3], 2u);
}

TEST(KvIndexTest, ReportsAllocatedBytes) {
  KvIndex index;
  EXPECT_EQ(index.Stats().bytes_allocated, 0u);
  std::vector<uint64_t> hashes(100000);
  std::iota(hashes.begin(), hashes.end(), 1);
  PlacementEvent e = Stored("a", Tier::kDevice, hashes);
  index.Apply(e, 1);
  const IndexStats s = index.Stats();
  // At least the hash (8 bytes in a node) and a locator slot (8 bytes) per
  // entry, at most a few times that.
  EXPECT_GE(s.bytes_allocated, 16u * 100000);
  EXPECT_LE(s.bytes_allocated, 64u * 100000 + (4u << 20));
}

TEST(KvIndexTest, GrowthKeepsEveryEntry) {
  KvIndex index;
  uint64_t seq = 0;
  std::vector<uint64_t> hashes;
  for (uint64_t i = 0; i < 50000; ++i) hashes.push_back(i * 0x9E3779B97F4A7C15ull);
  for (int w = 0; w < 3; ++w) {
    index.Apply(Stored("w" + std::to_string(w), Tier::kDevice, hashes), ++seq);
  }
  auto r = index.MatchSequenceHashes("m", std::span<const uint64_t>(hashes).first(4096));
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->workers.size(), 3u);
  EXPECT_EQ(r->workers[0].longest, 4096u);
  EXPECT_EQ(index.Stats().entries[0], 150000u);
}

// Every hash here has the same low 16 bits, which a locator slot keeps as
// its tag: each slot a probe passes matches the tag, so every lookup, insert,
// relabel and erase has to confirm the block in its node. Stores, removals
// (leaf-first and scattered), clears and table growth must stay exact.
TEST(KvIndexTest, EqualTagsStayExact) {
  auto hash = [](uint64_t chain, uint64_t k) {
    return ((chain * 4096 + k + 1) * 0x9E3779B97F4A7C15ull) << 16 | 0xBEEF;
  };
  KvIndex index;
  ReferenceIndex oracle;
  std::mt19937_64 rng(15);
  uint64_t seq = 0;
  auto apply = [&](const PlacementEvent& e) {
    ++seq;
    ASSERT_TRUE(index.Apply(e, seq).status.ok());
    oracle.Apply(e, seq);
  };
  for (int step = 0; step < 400; ++step) {
    const std::string worker = "w" + std::to_string(rng() % 6);
    const uint64_t chain = rng() % 40;
    const size_t len = 1 + rng() % 300;
    std::vector<uint64_t> hashes;
    for (size_t k = 0; k < len; ++k) hashes.push_back(hash(chain, k));
    const uint64_t op = rng() % 10;
    if (op < 6) {
      ASSERT_NO_FATAL_FAILURE(apply(Stored(worker, static_cast<Tier>(rng() % 2), hashes)));
    } else if (op < 8) {
      // Leaf-first suffix, as engines evict.
      std::vector<uint64_t> suffix(hashes.rbegin(), hashes.rbegin() + 1 + rng() % len);
      ASSERT_NO_FATAL_FAILURE(apply(Removed(worker, Tier::kDevice, suffix)));
    } else if (op < 9) {
      std::vector<uint64_t> some;
      for (uint64_t h : hashes) {
        if (rng() % 3 == 0) some.push_back(h);
      }
      ASSERT_NO_FATAL_FAILURE(apply(Removed(worker, Tier::kHost, some)));
    } else {
      ASSERT_NO_FATAL_FAILURE(apply(Cleared(worker)));
    }
    ASSERT_EQ(EntryRows(index), EntryRows(oracle)) << "step " << step;
    for (uint64_t c = 0; c < 40; c += 7) {
      std::vector<uint64_t> query;
      for (size_t k = 0; k < 300; ++k) query.push_back(hash(c, k));
      auto a = index.MatchSequenceHashes("m", query);
      auto b = oracle.MatchSequenceHashes("m", query);
      ASSERT_EQ(a.ok(), b.ok());
      if (a.ok()) {
        ASSERT_EQ(a->workers, b->workers) << "step " << step << " chain " << c;
      }
    }
  }
  EXPECT_EQ(index.Stats().digest, oracle.Stats().digest);
  // The scan sees what the test forced: tag matches on other blocks.
  std::optional<LocatorProfile> p = index.ProfileLocator("m", true);
  ASSERT_TRUE(p.has_value());
  EXPECT_GT(p->tag_false_matches, 0u);
  EXPECT_EQ(p->used, index.DistinctBlocks("m"));
}

TEST(KvIndexTest, SourcesBeyondTheLimitAreCountedNotIndexed) {
  KvIndex index;
  PlacementEvent event;
  event.model = "m";
  event.block_size = 16;
  uint64_t position = 0;
  for (uint32_t w = 0; w < 4096; ++w) {
    event.source = {"w" + std::to_string(w), 0};
    event.block_hashes = {uint64_t{w} + 1};
    index.Apply(event, ++position);
  }
  EXPECT_EQ(index.Stats().events_over_source_limit, 0u);
  event.source = {"one-too-many", 0};
  event.block_hashes = {1};
  // Reported like any undercount: not "fully indexed" with an OK status.
  const ApplyResult first = index.Apply(event, ++position);
  EXPECT_TRUE(first.applied);
  EXPECT_EQ(first.status.code(), absl::StatusCode::kResourceExhausted) << first.status;
  EXPECT_NE(first.status.message().find("source limit"), std::string::npos) << first.status;
  EXPECT_EQ(first.events_over_source_limit, 1u);
  EXPECT_EQ(first.blocks_not_indexed, 0u);  // not a memory shortage
  index.Apply(event, ++position);
  EXPECT_EQ(index.Stats().events_over_source_limit, 2u);
  EXPECT_EQ(index.Stats().entries[0], 4096u);  // fail closed: not indexed
  auto match = index.MatchSequenceHashes("m", std::vector<uint64_t>{1});
  ASSERT_TRUE(match.ok());
  ASSERT_EQ(match->workers.size(), 1u);
  EXPECT_EQ(match->workers[0].source.worker, "w0");
}

}  // namespace
}  // namespace kvindex::index
