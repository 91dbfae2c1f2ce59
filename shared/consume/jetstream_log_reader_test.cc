// JetStreamLogReader against a real nats-server, with a fault injected into
// the client's NextMsg: a read that fails after it took messages hands them
// over and reports the failure on the next call, so no position is lost.
#include "shared/consume/jetstream_log_reader.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "shared/codec/placement_codec.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"

namespace kvindex::consume {
namespace {

constexpr uint64_t kMessages = 10;

class JetStreamLogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = nats::testing::NatsServerProcess::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    nats::NatsOptions nats_options;
    nats_options.url = server_->url();
    auto connection = nats::Connection::Connect(nats_options, &registry_, "router", {}, false);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = std::move(*connection);
    ASSERT_TRUE(nats::EnsureStream(connection_->jetstream(), stream_).ok());
    const std::string subject = stream_.subjects.Events("m", "node-a");
    for (uint64_t seq = 1; seq <= kMessages; ++seq) {
      PlacementEvent stored;
      stored.model = "m";
      stored.source = {"w0", 0};
      stored.agent = "node-a";
      stored.block_size = 4;
      stored.block_hashes = {seq};
      std::string data;
      codec::EncodePlacementBatch(std::vector<PlacementEvent>{stored}, &data,
                                  {.agent = "node-a", .incarnation = 1, .msg_seq = seq});
      jsPubAck* ack = nullptr;
      ASSERT_EQ(js_Publish(&ack, connection_->jetstream(), subject.c_str(), data.data(),
                           static_cast<int>(data.size()), nullptr, nullptr),
                NATS_OK);
      jsPubAck_Destroy(ack);
    }
  }

  std::unique_ptr<nats::testing::NatsServerProcess> server_;
  prometheus::Registry registry_;
  std::unique_ptr<nats::Connection> connection_;
  nats::StreamOptions stream_;
};

TEST_F(JetStreamLogReaderTest, AReadThatFailsMidBatchHandsOverWhatItTook) {
  JetStreamLogOptions options;
  options.stream = stream_.name;
  options.subjects = stream_.subjects.All();
  int calls = 0;
  options.next_msg = [&](natsMsg** msg, natsSubscription* sub, int64_t timeout) {
    if (++calls == 1) {
      // Let the whole stream arrive first, so one read takes several messages.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      uint64_t queued = 0;
      while (natsSubscription_QueuedMsgs(sub, &queued) == NATS_OK && queued < kMessages &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
    if (calls == 4) return NATS_CONNECTION_CLOSED;  // after three messages
    return natsSubscription_NextMsg(msg, sub, timeout);
  };
  JetStreamLogReader reader(connection_->jetstream(), options);
  ASSERT_TRUE(reader.Open(1).ok());

  // As the apply loop does: a fresh batch per read, an error's batch unused.
  std::vector<uint64_t> positions;
  int errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (positions.size() < kMessages && std::chrono::steady_clock::now() < deadline) {
    LogBatch batch;
    const Status status = reader.Read(&batch, 4096, std::chrono::milliseconds(200));
    if (!status.ok()) {
      ++errors;
      EXPECT_TRUE(batch.messages.empty()) << "an error hands nothing over";
      continue;
    }
    for (const LogBatch::Message& message : batch.messages) {
      EXPECT_FALSE(message.invalid);
      positions.push_back(message.position);
    }
  }
  EXPECT_EQ(errors, 1) << "the failure is reported, once";
  std::vector<uint64_t> expected;
  for (uint64_t p = 1; p <= kMessages; ++p) expected.push_back(p);
  EXPECT_EQ(positions, expected) << "messages taken before the failure were lost";
}

}  // namespace
}  // namespace kvindex::consume
