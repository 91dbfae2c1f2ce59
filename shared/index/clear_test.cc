// Clears (kCleared, kWorkerExpired) on KvIndex: the clears of one message
// are one pass per model, the removal lock that fallback readers wait for is
// held for bounded runs of nodes, and the result is the ReferenceIndex's
// (which applies every clear on its own, in order).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shared/index/kv_index.h"
#include "shared/index/reference_index.h"
#include "shared/index/testing/events.h"

namespace kvindex::index {
namespace {

using testing::Expired;

// A clear of (worker, rank) in `model` ("": every model).
PlacementEvent Cleared(std::string worker, uint32_t rank, std::string model = "") {
  return testing::Cleared(std::move(worker), rank, std::move(model));
}

PlacementEvent Stored(std::string worker, uint32_t rank, std::string model,
                      std::vector<uint64_t> hashes, Tier tier = Tier::kDevice) {
  return testing::Stored(std::move(worker), tier, std::move(hashes), rank, std::move(model), 16);
}

class CountingObserver : public ClearObserver {
 public:
  void OnClearPass(const std::string& model, size_t sources) override {
    passes.push_back({model, sources});
  }
  void OnLockAcquired() override {
    EXPECT_FALSE(held);
    held = true;
  }
  void OnLockReleased(size_t nodes) override {
    EXPECT_TRUE(held);
    held = false;
    holds.push_back(nodes);
  }
  std::vector<std::pair<std::string, size_t>> passes;
  std::vector<size_t> holds;
  bool held = false;
};

constexpr uint32_t kChain = 3000;
constexpr uint32_t kRanks = 8;

std::vector<uint64_t> Chain(uint64_t salt) {
  std::vector<uint64_t> chain(kChain);
  for (uint32_t k = 0; k < kChain; ++k) chain[k] = 0x9E3779B97F4A7C15ull * (k + 1) + salt;
  return chain;
}

// Two models; in each, "agent" ranks 0-7 hold the whole chain and "other"
// holds every other block, so every block is a node of its own (kChain
// nodes per model).
std::vector<PlacementEvent> Fill() {
  std::vector<PlacementEvent> events;
  for (const std::string model : {"m1", "m2"}) {
    const std::vector<uint64_t> chain = Chain(model == "m1" ? 0 : 7);
    std::vector<uint64_t> even;
    for (uint32_t k = 0; k < kChain; k += 2) even.push_back(chain[k]);
    events.push_back(Stored("other", 0, model, even));
    for (uint32_t r = 0; r < kRanks; ++r) {
      events.push_back(Stored("agent", r, model, chain, static_cast<Tier>(r % kNumTiers)));
    }
  }
  return events;
}

void ExpectSameAs(const KvIndex& index, const ReferenceIndex& oracle) {
  EXPECT_EQ(index.Stats().digest, oracle.Stats().digest);
  EXPECT_EQ(EntryRows(index), EntryRows(oracle));
  for (const std::string model : {"m1", "m2"}) {
    const std::vector<uint64_t> chain = Chain(model == "m1" ? 0 : 7);
    EXPECT_EQ(*index.MatchSequenceHashes(model, chain), *oracle.MatchSequenceHashes(model, chain));
  }
}

TEST(ClearTest, OneMessagesClearsAreOnePassPerModel) {
  KvIndex index;
  ReferenceIndex oracle;
  const std::vector<PlacementEvent> fill = Fill();
  index.ApplyMessage(fill, 1);
  oracle.ApplyMessage(fill, 1);
  CountingObserver observer;
  index.SetClearObserverForTesting(&observer);
  // An agent's gap: one clear per source, in every model.
  std::vector<PlacementEvent> clears;
  for (uint32_t r = 0; r < kRanks; ++r) clears.push_back(Cleared("agent", r));
  index.ApplyMessage(clears, 2);
  oracle.ApplyMessage(clears, 2);
  ASSERT_EQ(observer.passes.size(), 2u) << "one pass per model, not one per clear";
  EXPECT_EQ(observer.passes[0].second, kRanks);
  EXPECT_EQ(observer.passes[1].second, kRanks);
  EXPECT_NE(observer.passes[0].first, observer.passes[1].first);
  ExpectSameAs(index, oracle);
  // Only "other" is left, one block per node.
  EXPECT_EQ(index.Stats().entries[0], oracle.Stats().entries[0]);
  EXPECT_EQ(index.Stats().sources, 2u);
}

TEST(ClearTest, TheRemovalLockIsHeldForBoundedRuns) {
  KvIndex index;
  index.ApplyMessage(Fill(), 1);
  CountingObserver observer;
  index.SetClearObserverForTesting(&observer);
  index.ApplyMessage(std::vector<PlacementEvent>{Expired("agent")}, 2);
  EXPECT_FALSE(observer.held);
  size_t changed = 0;
  for (size_t nodes : observer.holds) {
    EXPECT_LE(nodes, kClearNodesPerLockHold);
    changed += nodes;
  }
  // Every node of both models lost its agent holders.
  EXPECT_EQ(changed, 2 * kChain);
  EXPECT_GE(observer.holds.size(), 2 * kChain / kClearNodesPerLockHold);
  EXPECT_EQ(index.Stats().sources, 2u);
}

TEST(ClearTest, ClearsAndStoresOfOneMessageApplyInOrder) {
  KvIndex index;
  ReferenceIndex oracle;
  const std::vector<PlacementEvent> fill = Fill();
  index.ApplyMessage(fill, 1);
  oracle.ApplyMessage(fill, 1);
  const std::vector<uint64_t> chain = Chain(0);
  const std::vector<uint64_t> head(chain.begin(), chain.begin() + 100);
  // Runs of clears separated by stores: a store after a clear of the same
  // source stays, a clear after a store removes it, one model's clear leaves
  // the other model alone, repeated clears of one source are harmless.
  const std::vector<PlacementEvent> message = {
      Cleared("agent", 0),          Cleared("agent", 1, "m1"),
      Cleared("agent", 0),          Stored("agent", 0, "m1", head),
      Cleared("agent", 2),          Stored("agent", 2, "m2", head),
      Cleared("other", 0, "m2"),    Expired("agent"),
      Cleared("other", 0, "m1"),    Stored("agent", 3, "m1", head),
      Stored("new", 0, "m1", head), Cleared("agent", 4, "m1"),
      Cleared("new", 0, "m2"),
  };
  CountingObserver observer;
  index.SetClearObserverForTesting(&observer);
  index.ApplyMessage(message, 2);
  oracle.ApplyMessage(message, 2);
  ExpectSameAs(index, oracle);
  // Four runs of clears, one pass per model each, except the last: by then
  // the expiry took "agent" 4 from m1 and "new" never held anything in m2.
  EXPECT_EQ(observer.passes.size(), 6u);
}

}  // namespace
}  // namespace kvindex::index
