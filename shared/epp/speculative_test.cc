#include "shared/epp/speculative.h"

#include <gtest/gtest.h>

#include "shared/epp/picker.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

using Clock = SpeculativeCache::Clock;
using Rows = std::vector<std::pair<SourceKey, uint32_t>>;
constexpr auto kTtl = std::chrono::milliseconds(2000);

PlacementEvent Event(PlacementKind kind, std::string model, std::string worker, uint32_t rank,
                     std::vector<uint64_t> hashes = {}) {
  PlacementEvent e;
  e.kind = kind;
  e.model = std::move(model);
  e.source = {std::move(worker), rank};
  e.block_size = 4;
  e.block_hashes = std::move(hashes);
  return e;
}

Rows PrefixesAt(const SpeculativeCache& cache, std::string_view model,
                const std::vector<uint64_t>& seq, Clock::time_point at) {
  Rows rows;
  cache.Prefixes(model, seq, at, &rows);
  return rows;
}

TEST(SpeculativeCacheTest, LeadingBlocksPerSourceUntilTheTtl) {
  SpeculativeCache cache({.ttl = kTtl});
  const auto t0 = Clock::now();
  cache.Record("m", {"w0", 0}, std::vector<uint64_t>{10, 11, 12, 13}, t0);
  cache.Record("m", {"w1", 0}, std::vector<uint64_t>{10, 11}, t0);
  // A request sharing three blocks, then diverging.
  const Rows rows = PrefixesAt(cache, "m", {10, 11, 12, 99}, t0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], (std::pair<SourceKey, uint32_t>{{"w0", 0}, 3}));
  EXPECT_EQ(rows[1], (std::pair<SourceKey, uint32_t>{{"w1", 0}, 2}));
  // Another model, or a request not starting with a recorded block: nothing.
  EXPECT_TRUE(PrefixesAt(cache, "other", {10, 11}, t0).empty());
  EXPECT_TRUE(PrefixesAt(cache, "m", {99, 11}, t0).empty());
  // Just before the TTL ends it counts; at the TTL it never does.
  EXPECT_EQ(PrefixesAt(cache, "m", {10}, t0 + kTtl - std::chrono::nanoseconds(1)).size(), 2u);
  EXPECT_TRUE(PrefixesAt(cache, "m", {10, 11}, t0 + kTtl).empty());
  EXPECT_EQ(cache.counters().recorded.load(), 6u);
}

TEST(SpeculativeCacheTest, RemovalClearAndExpiryContradictTheirSourceOnly) {
  SpeculativeCache cache({.ttl = kTtl});
  const auto t0 = Clock::now();
  const std::vector<uint64_t> seq = {10, 11, 12};
  auto record_all = [&] {
    cache.Record("m", {"w0", 0}, seq, t0);
    cache.Record("m", {"w0", 1}, seq, t0);
    cache.Record("m", {"w1", 0}, seq, t0);
    cache.Record("n", {"w0", 0}, seq, t0);
  };
  record_all();
  ASSERT_EQ(PrefixesAt(cache, "m", seq, t0).size(), 3u);
  // A stored event contradicts nothing.
  cache.OnApplied(std::vector{Event(PlacementKind::kStored, "m", "w0", 0, {10})});
  EXPECT_EQ(PrefixesAt(cache, "m", seq, t0).size(), 3u);
  // A removal (of any block) from (m, w0, rank 0): all its entries go, now.
  cache.OnApplied(std::vector{Event(PlacementKind::kRemoved, "m", "w0", 0, {77})});
  Rows rows = PrefixesAt(cache, "m", seq, t0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].first, (SourceKey{"w0", 1}));
  EXPECT_EQ(rows[1].first, (SourceKey{"w1", 0}));
  EXPECT_EQ(PrefixesAt(cache, "n", seq, t0).size(), 1u);  // other model untouched
  // A pick after the removal is recorded afresh and counts again.
  cache.Record("m", {"w0", 0}, seq, t0);
  EXPECT_EQ(PrefixesAt(cache, "m", seq, t0).size(), 3u);
  // A clear without a model: that source in every model.
  cache.OnApplied(std::vector{Event(PlacementKind::kCleared, "", "w0", 0)});
  EXPECT_EQ(PrefixesAt(cache, "m", seq, t0).size(), 2u);
  EXPECT_TRUE(PrefixesAt(cache, "n", seq, t0).empty());
  // A worker's expiry: every rank, every model.
  record_all();
  cache.OnApplied(std::vector{Event(PlacementKind::kWorkerExpired, "", "w0", 0)});
  rows = PrefixesAt(cache, "m", seq, t0);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].first, (SourceKey{"w1", 0}));
  EXPECT_GE(cache.counters().invalidated.load(), 5u);
}

TEST(SpeculativeCacheTest, BoundedOffAndPurged) {
  SpeculativeCache cache({.ttl = kTtl, .max_entries = 4});
  const auto t0 = Clock::now();
  cache.Record("m", {"w0", 0}, std::vector<uint64_t>{1, 2, 3, 4, 5, 6}, t0);
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.counters().dropped_full.load(), 2u);
  EXPECT_EQ(PrefixesAt(cache, "m", {1, 2, 3, 4, 5, 6}, t0)[0].second, 4u);
  // Once they expired, a full cache purges them to make room.
  cache.Record("m", {"w1", 0}, std::vector<uint64_t>{7, 8}, t0 + kTtl);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.counters().expired.load(), 4u);
  SpeculativeCache off({.ttl = std::chrono::milliseconds(0)});
  off.Record("m", {"w0", 0}, std::vector<uint64_t>{1}, t0);
  EXPECT_EQ(off.size(), 0u);
  EXPECT_TRUE(PrefixesAt(off, "m", {1}, t0).empty());
}

// The picker: a burst sharing a prefix nobody holds yet lands on the first
// pick's endpoint; the index never sees the entries; a removal from that
// source ends it.
TEST(SpeculativeCacheTest, PickerSendsABurstWhereTheFirstWent) {
  constexpr uint32_t kBlock = 4;
  index::KvIndex index;
  // The model's block size, from a store of unrelated blocks on w2.
  index.Apply(Event(PlacementKind::kStored, "m", "w2", 0, {424242}), 1);
  EndpointTable endpoints;
  std::vector<Endpoint> list;
  for (int i = 0; i < 3; ++i) {
    Endpoint e;
    e.address = "10.0.0." + std::to_string(i + 1) + ":8000";
    e.source.worker = "w" + std::to_string(i);
    e.model = "m";
    list.push_back(std::move(e));
  }
  endpoints.SetStatic(std::move(list));
  SpeculativeCache cache({.ttl = std::chrono::seconds(60)});
  Picker picker({}, &index, &endpoints);
  picker.SetSpeculative(&cache);
  const index::IndexStats before = index.Stats();

  std::vector<uint32_t> first(4 * kBlock);
  for (uint32_t i = 0; i < first.size(); ++i) first[i] = 1000 + i;
  PickInput input;
  input.model = "m";
  input.tokens = &first;
  auto pick = picker.Pick(input);
  ASSERT_TRUE(pick.ok()) << pick.status();
  EXPECT_EQ(pick->speculative_blocks, 0u);
  const std::string where = pick->endpoints[0];
  picker.Release(where);
  // Requests sharing the first three blocks, differing after: the same
  // endpoint, three speculative blocks, whatever their ties say.
  for (uint32_t r = 0; r < 8; ++r) {
    std::vector<uint32_t> next = first;
    next.back() = 5000 + r;
    input.tokens = &next;
    auto again = picker.Pick(input);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->endpoints[0], where) << r;
    EXPECT_EQ(again->speculative_blocks, 3u);
    EXPECT_EQ(again->matched_blocks, 3u);
    picker.Release(where);
  }
  EXPECT_EQ(cache.counters().picks.load(), 8u);
  // Never the index's: its entries and digest did not move.
  const index::IndexStats after = index.Stats();
  EXPECT_EQ(after.digest, before.digest);
  EXPECT_EQ(after.entries[0], before.entries[0]);

  // The engine reports a removal: the picked source's entries stop counting.
  const std::string worker = "w" + std::to_string(where[7] - '1');
  cache.OnApplied(std::vector{Event(PlacementKind::kRemoved, "m", worker, 0, {1})});
  std::vector<uint32_t> last = first;
  last.back() = 9999;
  input.tokens = &last;
  auto after_removal = picker.Pick(input);
  ASSERT_TRUE(after_removal.ok());
  EXPECT_EQ(after_removal->speculative_blocks, 0u);
}

}  // namespace
}  // namespace kvindex::epp
