#include "shared/consume/apply_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shared/index/kv_index.h"

namespace kvindex::consume {
namespace {

PlacementEvent Stored(std::string worker, std::vector<uint64_t> hashes, Tier tier = Tier::kDevice) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {std::move(worker), 0};
  e.agent = "node-a";
  e.timestamp_ns = 1'700'000'000'000'000'000ull;
  e.tier = tier;
  e.block_size = 4;
  e.block_hashes = std::move(hashes);
  return e;
}

bool WaitCaughtUp(const ApplyLoop& loop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!loop.CaughtUp()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(ApplyLoopTest, AssignsPositionsAndTracksActivity) {
  InProcessSink sink;
  index::KvIndex index;
  RouterProbe probe;
  ApplyLoop loop(&sink, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  std::vector<PlacementEvent> events = {Stored("w0", {1, 2}), Stored("w1", {1}, Tier::kHost)};
  ASSERT_TRUE(sink.Publish(events).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 2u);
  EXPECT_EQ(index.Stats().entries[0], 2u);
  EXPECT_EQ(index.Stats().entries[1], 1u);
  auto activity = loop.Activity();
  ASSERT_EQ(activity.size(), 2u);
  EXPECT_EQ(activity[0].source.worker, "w0");
  EXPECT_EQ(activity[0].agent, "node-a");
  EXPECT_EQ(activity[0].model, "m");
  EXPECT_EQ(activity[0].last_event_ns, 1'700'000'000'000'000'000ull);

  // Stop and start again: positions continue after applied_seq.
  loop.Stop();
  loop.Stop();
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{Stored("w2", {1})}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 3u);
  EXPECT_EQ(index.Stats().sources, 3u);
  loop.Stop();
}

TEST(ApplyLoopTest, ModelFilterKeepsPositionsMoving) {
  InProcessSink sink;
  index::KvIndex index;
  ApplyOptions options;
  options.models = {"other"};
  ApplyLoop loop(&sink, &index, nullptr, options);
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{Stored("w0", {1})}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 1u);
  EXPECT_EQ(index.Stats().entries[0], 0u);
}

}  // namespace
}  // namespace kvindex::consume
