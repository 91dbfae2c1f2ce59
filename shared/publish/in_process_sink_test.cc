#include "shared/publish/in_process_sink.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvindex {
namespace {

PlacementEvent Stored(uint64_t id) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {"w0", 0};
  e.event_id = id;
  e.block_hashes = {id};
  return e;
}

TEST(InProcessSinkTest, DrainsInPublishOrder) {
  InProcessSink sink(16);
  std::vector<PlacementEvent> batch = {Stored(1), Stored(2), Stored(3)};
  ASSERT_TRUE(sink.Publish(batch).ok());
  std::vector<PlacementEvent> out;
  EXPECT_EQ(sink.Drain(&out, 2, std::chrono::milliseconds(0)), 2u);
  EXPECT_EQ(sink.Drain(&out, 10, std::chrono::milliseconds(0)), 1u);
  ASSERT_EQ(out.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(out[i].event_id, i + 1);
  EXPECT_EQ(sink.published(), 3u);
  EXPECT_EQ(sink.drained(), 3u);
}

TEST(InProcessSinkTest, PublisherBlocksWhenFullAndFlushWaitsForConsumer) {
  InProcessSink sink(2);
  std::thread producer([&] {
    for (uint64_t i = 0; i < 100; ++i) {
      PlacementEvent e = Stored(i);
      ASSERT_TRUE(sink.Publish({&e, 1}).ok());
    }
    ASSERT_TRUE(sink.Flush().ok());
  });
  std::vector<PlacementEvent> out;
  while (out.size() < 100) {
    EXPECT_LE(sink.pending(), 2u);
    sink.Drain(&out, 1, std::chrono::milliseconds(50));
  }
  producer.join();
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(out[i].event_id, i);
}

TEST(InProcessSinkTest, CloseFailsPublishers) {
  InProcessSink sink(1);
  sink.Close();
  PlacementEvent e = Stored(1);
  // Closed for good: FailedPrecondition, which callers do not retry
  // (Unavailable would have them retry forever).
  EXPECT_EQ(sink.Publish({&e, 1}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(sink.Flush().code(), absl::StatusCode::kOk);  // nothing was published
}

}  // namespace
}  // namespace kvindex
