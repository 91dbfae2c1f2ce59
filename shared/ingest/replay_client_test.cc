// ZmqReplayClient against a real ROUTER socket serving both reply layouts.
#include "shared/ingest/replay_client.h"

#include <gtest/gtest.h>

#include "shared/ingest/testing/zmq_test_util.h"

namespace kvindex::ingest {
namespace {

using testing::ReplayServer;
using testing::StoredBatch;

struct Received {
  uint64_t seq;
  bool has_topic;
  std::string topic;
  std::string payload;
};

class ReplayClientTest : public ::testing::TestWithParam<ReplayServer::Layout> {
 protected:
  Status Fetch(ZmqReplayClient& client, uint64_t start, size_t stop_after = SIZE_MAX) {
    received_.clear();
    return client.Fetch(start, [&](const ReplayMessage& m) {
      received_.push_back(
          {m.seq, m.has_topic, std::string(m.topic.name),
           std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size())});
      return received_.size() < stop_after;
    });
  }
  zmq::context_t context_{1};
  std::vector<Received> received_;
};

TEST_P(ReplayClientTest, ReplaysFromStartSeqUntilEndMarker) {
  ReplayServer server(context_, GetParam());
  for (uint64_t s = 3; s <= 6; ++s) server.Add(s, StoredBatch(s));
  ZmqReplayClient client(
      &context_, {.endpoint = server.endpoint(), .timeout = std::chrono::milliseconds(5000)});
  ASSERT_TRUE(Fetch(client, 4).ok());
  ASSERT_EQ(received_.size(), 3u);
  const bool with_topic = GetParam() == ReplayServer::Layout::kWithTopic;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(received_[i].seq, 4 + i);
    EXPECT_EQ(received_[i].payload, StoredBatch(4 + i));
    EXPECT_EQ(received_[i].has_topic, with_topic);
    EXPECT_EQ(received_[i].topic, with_topic ? "kv-events" : "");
  }
  EXPECT_EQ(server.requests(), std::vector<uint64_t>{4});
}

TEST_P(ReplayClientTest, EmptyReplayIsJustTheEndMarker) {
  ReplayServer server(context_, GetParam());
  ZmqReplayClient client(
      &context_, {.endpoint = server.endpoint(), .timeout = std::chrono::milliseconds(5000)});
  ASSERT_TRUE(Fetch(client, 0).ok());
  EXPECT_TRUE(received_.empty());
}

TEST_P(ReplayClientTest, AbandonedStreamDoesNotLeakIntoTheNextRequest) {
  ReplayServer server(context_, GetParam());
  for (uint64_t s = 0; s < 50; ++s) server.Add(s, StoredBatch(s % 10));
  ZmqReplayClient client(
      &context_, {.endpoint = server.endpoint(), .timeout = std::chrono::milliseconds(5000)});
  ASSERT_TRUE(Fetch(client, 0, /*stop_after=*/2).ok());
  EXPECT_EQ(received_.size(), 2u);
  ASSERT_TRUE(Fetch(client, 45).ok());
  ASSERT_EQ(received_.size(), 5u);
  EXPECT_EQ(received_.front().seq, 45u);
  EXPECT_EQ(received_.back().seq, 49u);
}

TEST_P(ReplayClientTest, SilentServerTimesOut) {
  ReplayServer server(context_, GetParam());
  server.set_mode(ReplayServer::Mode::kSilent);
  ZmqReplayClient client(
      &context_, {.endpoint = server.endpoint(), .timeout = std::chrono::milliseconds(200)});
  const auto start = std::chrono::steady_clock::now();
  const Status status = Fetch(client, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_P(ReplayClientTest, MalformedReplyIsDataLossAndCounted) {
  ReplayServer server(context_, GetParam());
  server.set_mode(ReplayServer::Mode::kMalformed);
  SessionCounters counters;
  ZmqReplayClient client(&context_,
                         {.endpoint = server.endpoint(), .timeout = std::chrono::seconds(5)},
                         nullptr, &counters);
  EXPECT_EQ(Fetch(client, 0).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(counters.frames_invalid[static_cast<int>(FrameError::kFrameCount)].load(), 1u);
}

INSTANTIATE_TEST_SUITE_P(BothLayouts, ReplayClientTest,
                         ::testing::Values(ReplayServer::Layout::kWithTopic,
                                           ReplayServer::Layout::kWithoutTopic),
                         [](const auto& info) {
                           return info.param == ReplayServer::Layout::kWithTopic ? "WithTopic"
                                                                                 : "WithoutTopic";
                         });

TEST(ReplayClientErrorsTest, NoServerTimesOut) {
  zmq::context_t context(1);
  const int port = testing::FreePort();
  ZmqReplayClient client(&context, {.endpoint = "tcp://127.0.0.1:" + std::to_string(port),
                                    .timeout = std::chrono::milliseconds(150)});
  const Status status = client.Fetch(0, [](const ReplayMessage&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
}

TEST(ReplayClientErrorsTest, BadEndpointIsInvalidArgument) {
  zmq::context_t context(1);
  ZmqReplayClient client(&context, {.endpoint = "nonsense", .timeout = std::chrono::seconds(1)});
  const Status status = client.Fetch(0, [](const ReplayMessage&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(ReplayClientErrorsTest, StopFlagCancels) {
  zmq::context_t context(1);
  ReplayServer server(context, ReplayServer::Layout::kWithTopic);
  server.set_mode(ReplayServer::Mode::kSilent);
  std::atomic<bool> stop{true};
  ZmqReplayClient client(
      &context, {.endpoint = server.endpoint(), .timeout = std::chrono::seconds(30)}, &stop);
  const Status status = client.Fetch(0, [](const ReplayMessage&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

}  // namespace
}  // namespace kvindex::ingest
