// A source's id lives exactly while the source holds an entry (model_index.h,
// docs/security.md "A fleet-wide source quota"): store-then-remove churn of
// made-up sources cannot exhaust a model's ids, and a replica restored from a
// checkpoint mid-churn (which keeps entries, not ids) refuses exactly the
// stores the replica that read the whole log refuses. Typed: KvIndex and the
// ReferenceIndex oracle obey the same rule.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"
#include "shared/index/testing/events.h"

namespace kvindex::index {
namespace {

using testing::Cleared;
using testing::Removed;
using testing::Stored;

template <typename T>
std::unique_ptr<T> Make(uint32_t max_sources);
template <>
std::unique_ptr<KvIndex> Make<KvIndex>(uint32_t max_sources) {
  KvIndexOptions options;
  options.max_sources_per_model = max_sources;
  return std::make_unique<KvIndex>(options);
}
template <>
std::unique_ptr<ReferenceIndex> Make<ReferenceIndex>(uint32_t max_sources) {
  return std::make_unique<ReferenceIndex>(max_sources);
}

template <typename T>
class SourceIdsTest : public ::testing::Test {};
using Implementations = ::testing::Types<KvIndex, ReferenceIndex>;
TYPED_TEST_SUITE(SourceIdsTest, Implementations);

std::string Fake(uint32_t i) { return "fake-" + std::to_string(i); }

// Ten thousand made-up sources, each stored (two tiers) and then removed
// without a clear, used to keep 4,096 ids for good: every later new source
// of the model was refused (over_source_limit). Now each frees its id with
// its last entry, and the model still takes its full 4,096 sources.
TYPED_TEST(SourceIdsTest, StoreThenRemoveChurnDoesNotExhaustIds) {
  auto index = Make<TypeParam>(4096);
  uint64_t seq = 0;
  for (uint32_t i = 0; i < 10000; ++i) {
    const uint64_t h = 1000000 + i;
    ASSERT_TRUE(index->Apply(Stored(Fake(i), Tier::kDevice, {h, h + 1}), ++seq).status.ok());
    ASSERT_TRUE(index->Apply(Stored(Fake(i), Tier::kHost, {h}), ++seq).status.ok());
    index->Apply(Removed(Fake(i), Tier::kDevice, {h + 1, h}), ++seq);
    index->Apply(Removed(Fake(i), Tier::kHost, {h}), ++seq);
  }
  EXPECT_EQ(index->Stats().events_over_source_limit, 0u);
  EXPECT_EQ(index->Stats().sources, 0u);
  // Only a store that is cut short (memory, not ids) or a new source past
  // 4,096 holding entries is refused.
  for (uint32_t w = 0; w < 4096; ++w) {
    const ApplyResult r =
        index->Apply(Stored("w" + std::to_string(w), Tier::kDevice, {w + 1}), ++seq);
    ASSERT_TRUE(r.status.ok()) << "source " << w << ": " << r.status;
  }
  const ApplyResult over = index->Apply(Stored("one-too-many", Tier::kDevice, {1}), ++seq);
  EXPECT_EQ(over.events_over_source_limit, 1u);
  EXPECT_EQ(over.status.code(), absl::StatusCode::kResourceExhausted);
  // A source that removes its last entry makes room for another at once.
  index->Apply(Removed("w7", Tier::kDevice, {8}), ++seq);
  EXPECT_TRUE(index->Apply(Stored("one-too-many", Tier::kDevice, {1}), ++seq).status.ok());
  EXPECT_EQ(index->Stats().sources, 4096u);
  EXPECT_EQ(index->Stats().events_over_source_limit, 1u);
}

// A seeded log of made-up sources near the model's limit: stores, removals
// (some taking a source's last entry), clears. Replica `whole` applies all
// of it; replica `restored` is rebuilt from `whole`'s entries (the
// checkpoint seam) at `restore_at` and applies the rest. Returns a
// description of the first difference in what the two refuse, or "".
template <typename T>
std::string RunChurn(uint64_t seed, uint32_t max_sources, uint32_t sources, int steps,
                     int restore_at) {
  std::mt19937_64 rng(seed);
  auto whole = Make<T>(max_sources);
  std::unique_ptr<T> restored;
  // What each fake source holds (so removals often take the last entry).
  std::vector<std::vector<uint64_t>> held(sources);
  uint64_t refusals = 0;
  for (int step = 0; step < steps; ++step) {
    if (step == restore_at) {
      restored = Make<T>(max_sources);
      whole->ForEachEntry([&](std::string_view m, const SourceKey& s, Tier t, uint64_t h) {
        restored->RestoreEntry(m, s, t, h, 4);
      });
      restored->RestoreAppliedSeq(whole->Stats().applied_seq);
      if (restored->Stats().digest != whole->Stats().digest) return "restored digest differs";
    }
    const uint32_t w = static_cast<uint32_t>(rng() % sources);
    PlacementEvent e;
    const uint64_t dice = rng() % 100;
    if (dice < 55 || held[w].empty()) {
      std::vector<uint64_t> hashes;
      for (uint64_t n = 1 + rng() % 3; n > 0; --n) hashes.push_back(1 + rng() % 5000);
      e = Stored(Fake(w), Tier::kDevice, hashes);
    } else if (dice < 92) {
      // Most removals take everything the source holds (its last entry).
      std::vector<uint64_t> hashes = held[w];
      if (rng() % 4 == 0) hashes.resize(1 + rng() % hashes.size());
      e = Removed(Fake(w), Tier::kDevice, hashes);
    } else {
      e = Cleared(Fake(w));
    }
    const uint64_t position = static_cast<uint64_t>(step) + 1;
    const ApplyResult a = whole->Apply(e, position);
    if (restored != nullptr) {
      const ApplyResult b = restored->Apply(e, position);
      if (a.events_over_source_limit != b.events_over_source_limit ||
          a.status.code() != b.status.code()) {
        return "step " + std::to_string(step) + ": " + Fake(w) + " refused by " +
               (a.events_over_source_limit != 0 ? "the whole-log replica" : "the restored one");
      }
    }
    refusals += a.events_over_source_limit;
    // Track what `whole` holds of the source now.
    held[w].clear();
    for (const SourceInfo& info : whole->Sources()) {
      if (info.source.worker != Fake(w)) continue;
      whole->ForEachEntry([&](std::string_view, const SourceKey& s, Tier, uint64_t h) {
        if (s == info.source) held[w].push_back(h);
      });
    }
  }
  if (restored == nullptr) return "never restored";
  const IndexStats a = whole->Stats(), b = restored->Stats();
  if (a.digest != b.digest) return "final digest differs";
  if (a.sources != b.sources) return "final sources differ";
  if (EntryRows(*whole) != EntryRows(*restored)) return "final entries differ";
  // The log did reach the limit, or the test proves nothing.
  if (refusals == 0) return "no store was refused: the log never reached the limit";
  return "";
}

TYPED_TEST(SourceIdsTest, ARestoredReplicaRefusesWhatTheWholeLogRefuses) {
  for (uint64_t seed : {1, 2, 3}) {
    for (int restore_at : {300, 1100}) {
      EXPECT_EQ(RunChurn<TypeParam>(seed, 64, 160, 2000, restore_at), "")
          << "seed " << seed << ", restored at step " << restore_at;
    }
  }
}

// The same at the real limit (4,096 ids, KvIndex only: the oracle's count of
// sources is a scan): 4,080 sources hold entries; made-up sources come and
// go, every fifth keeping its entry for 100 more sources, so the model
// hovers at its limit, refusing some and taking others.
TEST(SourceIdsRealLimitTest, ARestoredReplicaRefusesWhatTheWholeLogRefuses) {
  KvIndex whole, restored;
  uint64_t seq = 0;
  for (uint32_t w = 0; w < 4080; ++w) {
    whole.Apply(Stored("w" + std::to_string(w), Tier::kDevice, {w + 1}), ++seq);
  }
  auto churn = [](KvIndex* index, uint32_t from, uint32_t to, uint64_t* at,
                  std::vector<uint64_t>* refused) {
    for (uint32_t i = from; i < to; ++i) {
      const uint64_t h = 1000000 + i;
      refused->push_back(
          index->Apply(Stored(Fake(i), Tier::kDevice, {h}), ++*at).events_over_source_limit);
      if (i % 5 != 0) {
        index->Apply(Removed(Fake(i), Tier::kDevice, {h}), ++*at);
      } else if (i >= 100) {
        index->Apply(Removed(Fake(i - 100), Tier::kDevice, {h - 100}), ++*at);
      }
    }
  };
  std::vector<uint64_t> refused_whole, refused_restored;
  churn(&whole, 0, 3000, &seq, &refused_whole);
  whole.ForEachEntry([&](std::string_view m, const SourceKey& s, Tier t, uint64_t h) {
    restored.RestoreEntry(m, s, t, h, 4);
  });
  restored.RestoreAppliedSeq(seq);
  ASSERT_EQ(restored.Stats().digest, whole.Stats().digest);
  uint64_t seq_restored = seq;
  const size_t before = refused_whole.size();
  churn(&whole, 3000, 6000, &seq, &refused_whole);
  churn(&restored, 3000, 6000, &seq_restored, &refused_restored);
  const std::vector<uint64_t> tail(refused_whole.begin() + static_cast<ptrdiff_t>(before),
                                   refused_whole.end());
  EXPECT_EQ(tail, refused_restored);
  EXPECT_EQ(whole.Stats().digest, restored.Stats().digest);
  EXPECT_EQ(whole.Stats().sources, restored.Stats().sources);
  // The tail both refused and took new sources: the decision was live.
  uint64_t refusals = 0;
  for (uint64_t r : tail) refusals += r;
  EXPECT_GT(refusals, 0u);
  EXPECT_LT(refusals, tail.size());
}

}  // namespace
}  // namespace kvindex::index
