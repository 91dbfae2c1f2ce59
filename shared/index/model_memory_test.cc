// Memory per model: a model costs what it holds (its node arena, block
// locator and source tables are committed as they grow), and
// KvIndexOptions::max_models caps how many models a log can create: stored
// events of further models are left out and counted, never an allocation.
// Measured with the index's own accounting (IndexStats::bytes_allocated).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"

namespace kvindex::index {
namespace {

PlacementEvent Stored(std::string model, std::string worker, uint64_t first, size_t count) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = std::move(model);
  e.source = {std::move(worker), 0};
  e.tier = Tier::kDevice;
  e.block_size = 16;
  e.block_hashes.resize(count);
  std::iota(e.block_hashes.begin(), e.block_hashes.end(), first);
  return e;
}

TEST(ModelMemoryTest, ManySmallModelsCostWhatTheyHold) {
  // Forged model names, each with one small chain: before, every model
  // prefaulted a 2 MiB arena chunk and 48 KiB of id tables (2.1 MiB each).
  constexpr int kModels = 100;
  KvIndex index;
  uint64_t position = 0;
  for (int m = 0; m < kModels; ++m) {
    ASSERT_TRUE(
        index.Apply(Stored("model-" + std::to_string(m), "w", 1, 4), ++position).status.ok());
  }
  const IndexStats stats = index.Stats();
  EXPECT_EQ(index.Models().size(), static_cast<size_t>(kModels));
  EXPECT_EQ(stats.entries[0], 4u * kModels);
  const uint64_t per_model = stats.bytes_allocated / kModels;
  EXPECT_LT(per_model, 64u << 10) << stats.bytes_allocated << " bytes for " << kModels << " models";
  // Still exact, and a model grows past its first chunk as before.
  ASSERT_TRUE(index.Apply(Stored("model-7", "w", 1000, 300000), ++position).status.ok());
  auto match = index.MatchSequenceHashes("model-7", std::vector<uint64_t>{1000, 1001, 1002});
  ASSERT_TRUE(match.ok());
  ASSERT_EQ(match->workers.size(), 1u);
  EXPECT_EQ(match->workers[0].longest, 3u);
  EXPECT_GT(index.Stats().bytes_allocated, stats.bytes_allocated + 300000u * 16);
}

TEST(ModelMemoryTest, MaxModelsCapsCreationAndCountsTheDroppedEvents) {
  KvIndexOptions options;
  options.max_models = 3;
  KvIndex index(options);
  ReferenceIndex oracle;  // given only what the index admits
  uint64_t position = 0;
  uint64_t dropped = 0;
  for (int round = 0; round < 3; ++round) {
    for (int m = 0; m < 6; ++m) {
      const PlacementEvent e =
          Stored("m" + std::to_string(m), "w" + std::to_string(round), 10 * round + 1, 4);
      const ApplyResult r = index.Apply(e, ++position);
      EXPECT_TRUE(r.applied);
      if (m < 3) {
        EXPECT_TRUE(r.status.ok()) << r.status;
        oracle.Apply(e, position);
      } else {
        EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
        EXPECT_NE(r.status.message().find("max_models 3"), std::string::npos) << r.status;
        EXPECT_EQ(r.events_over_model_limit, 1u);
        ++dropped;
        oracle.ApplyMessage({}, position);
      }
    }
  }
  EXPECT_EQ(index.Models(), (std::vector<std::string>{"m0", "m1", "m2"}));
  const IndexStats stats = index.Stats();
  EXPECT_EQ(stats.events_over_model_limit, dropped);
  EXPECT_EQ(stats.digest, oracle.Stats().digest);
  EXPECT_EQ(stats.entries[0], oracle.Stats().entries[0]);
  EXPECT_FALSE(index.MatchSequenceHashes("m4", std::vector<uint64_t>{1}).ok());
  // Removals and clears of unknown models allocate nothing and are no drop.
  PlacementEvent removed = Stored("m5", "w0", 1, 4);
  removed.kind = PlacementKind::kRemoved;
  EXPECT_TRUE(index.Apply(removed, ++position).status.ok());
  EXPECT_EQ(index.Stats().events_over_model_limit, dropped);
  // A restore is held to the same cap.
  KvIndex restored(options);
  index.ForEachEntry([&](std::string_view model, const SourceKey& source, Tier tier,
                         uint64_t hash) { restored.RestoreEntry(model, source, tier, hash, 16); });
  restored.RestoreEntry("m9", {"w", 0}, Tier::kDevice, 5, 16);
  restored.RestoreAppliedSeq(position);
  EXPECT_EQ(restored.Models(), index.Models());
  EXPECT_EQ(restored.Stats().digest, stats.digest);
  EXPECT_EQ(restored.Stats().events_over_model_limit, 1u);
}

}  // namespace
}  // namespace kvindex::index
