// JetStreamPublisher against a real nats-server: events larger than the
// server's max_payload (1 MB by default) are split into consecutive pieces
// that each fit, so nothing is refused and retried forever, and a router
// applying the pieces holds exactly what the whole events meant.
#include "shared/publish/jetstream_publisher.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <thread>

#include "shared/consume/jetstream_log_reader.h"
#include "shared/index/kv_index.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"

namespace kvindex {
namespace {

// A nats-server, a connection to it and the default stream, for each test.
class JetStreamPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = nats::testing::NatsServerProcess::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    nats::NatsOptions nats_options;
    nats_options.url = server_->url();
    auto connection = nats::Connection::Connect(nats_options, &registry_, "agent", {}, false);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = std::move(*connection);
    ASSERT_TRUE(nats::EnsureStream(connection_->jetstream(), stream_).ok());
  }

  std::unique_ptr<nats::testing::NatsServerProcess> server_;
  prometheus::Registry registry_;
  std::unique_ptr<nats::Connection> connection_;
  nats::StreamOptions stream_;
};

TEST_F(JetStreamPublisherTest, EventsLargerThanMaxPayloadAreSplitInChainOrder) {
  PlacementEvent stored;
  stored.model = "m";
  stored.source = {"w0", 0};
  stored.block_size = 16;
  stored.parent_hash = 7;
  stored.block_hashes.resize(300000);  // ~2.7 MB encoded
  std::iota(stored.block_hashes.begin(), stored.block_hashes.end(), 1000);
  PlacementEvent removed = stored;
  removed.kind = PlacementKind::kRemoved;
  removed.parent_hash.reset();
  removed.block_hashes.resize(200000);
  const std::vector<PlacementEvent> events = {stored, removed};

  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher.Start().ok());
  ASSERT_TRUE(publisher.Publish(events).ok());
  auto flushed = std::async(std::launch::async, [&] { return publisher.Flush(); });
  const bool done = flushed.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!done) publisher.Stop();  // releases Flush
  ASSERT_TRUE(done) << "messages over max_payload are refused and retried forever";
  ASSERT_TRUE(flushed.get().ok());
  publisher.Stop();

  consume::JetStreamLogOptions log_options;
  log_options.stream = stream_.name;
  log_options.subjects = stream_.subjects.All();
  consume::JetStreamLogReader reader(connection_->jetstream(), log_options);
  ASSERT_TRUE(reader.Open(1).ok());
  std::vector<PlacementEvent> read;
  index::KvIndex pieces, whole;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t hashes = 0;
  while (hashes < 500000 && std::chrono::steady_clock::now() < deadline) {
    consume::LogBatch batch;
    ASSERT_TRUE(reader.Read(&batch, 4096, std::chrono::milliseconds(100)).ok());
    for (size_t m = 0; m < batch.messages.size(); ++m) {
      ASSERT_FALSE(batch.messages[m].invalid);
      pieces.ApplyMessage(batch.Events(m), batch.messages[m].position);
      for (const PlacementEvent& event : batch.Events(m)) {
        read.push_back(event);
        hashes += event.block_hashes.size();
      }
    }
  }
  ASSERT_GT(read.size(), 2u);  // split
  std::vector<uint64_t> stored_hashes, removed_hashes;
  std::optional<uint64_t> expected_parent = 7;
  for (const PlacementEvent& event : read) {
    if (event.kind == PlacementKind::kStored) {
      EXPECT_EQ(event.parent_hash, expected_parent);
      expected_parent = event.block_hashes.back();
      stored_hashes.insert(stored_hashes.end(), event.block_hashes.begin(),
                           event.block_hashes.end());
    } else {
      removed_hashes.insert(removed_hashes.end(), event.block_hashes.begin(),
                            event.block_hashes.end());
    }
  }
  EXPECT_EQ(stored_hashes, stored.block_hashes);
  EXPECT_EQ(removed_hashes, removed.block_hashes);
  whole.ApplyMessage(events, 1);
  EXPECT_EQ(pieces.Stats().digest, whole.Stats().digest);
}

TEST_F(JetStreamPublisherTest, NothingIsSentBeforeTheStreamIsReady) {
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.max_delay = std::chrono::microseconds(100);
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  publisher.SetStreamReady(false);
  ASSERT_TRUE(publisher.Start().ok());
  PlacementEvent stored;
  stored.model = "m";
  stored.source = {"w0", 0};
  stored.block_size = 16;
  stored.block_hashes = {1, 2, 3};
  ASSERT_TRUE(publisher.Publish(std::vector<PlacementEvent>{stored}).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto held = nats::GetStreamState(connection_->jetstream(), stream_.name);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->last_seq, 0u);  // buffered, not sent
  publisher.SetStreamReady(true);
  ASSERT_TRUE(publisher.Flush().ok());
  auto sent = nats::GetStreamState(connection_->jetstream(), stream_.name);
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(sent->last_seq, 1u);
  publisher.Stop();
}

}  // namespace
}  // namespace kvindex
