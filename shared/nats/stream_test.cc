// Integration tests of EnsureStream / GetStreamState / FromNats against real
// nats-server processes, standalone and as a 3-node JetStream cluster.
#include "shared/nats/stream.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "shared/nats/connection.h"
#include "shared/nats/testing/nats_server.h"

namespace kvindex::nats {
namespace {

using std::chrono::milliseconds;
using testing::NatsServerProcess;

struct StreamInfoHolder {
  ~StreamInfoHolder() { jsStreamInfo_Destroy(info); }
  jsStreamInfo* info = nullptr;
};

int64_t ConfiguredMaxAgeNanos(jsCtx* js, const std::string& name) {
  StreamInfoHolder holder;
  jsErrCode code = static_cast<jsErrCode>(0);
  if (js_GetStreamInfo(&holder.info, js, name.c_str(), nullptr, &code) != NATS_OK) return -1;
  return holder.info->Config->MaxAge;
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = NatsServerProcess::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    NatsOptions options;
    options.url = server_->url();
    auto connection = Connection::Connect(options, nullptr, "router", {}, false);
    ASSERT_TRUE(connection.ok()) << connection.status();
    connection_ = std::move(*connection);
  }
  jsCtx* js() { return connection_->jetstream(); }

  std::unique_ptr<NatsServerProcess> server_;
  std::unique_ptr<Connection> connection_;
};

TEST_F(StreamTest, EnsureIsIdempotentAndUpdatesMaxAge) {
  StreamOptions options;
  ASSERT_TRUE(EnsureStream(js(), options).ok());
  ASSERT_TRUE(EnsureStream(js(), options).ok());
  EXPECT_EQ(ConfiguredMaxAgeNanos(js(), options.name), int64_t{24} * 3600 * 1'000'000'000);

  options.max_age = std::chrono::hours(2);
  ASSERT_TRUE(EnsureStream(js(), options).ok());
  EXPECT_EQ(ConfiguredMaxAgeNanos(js(), options.name), int64_t{2} * 3600 * 1'000'000'000);

  // Storage cannot change on an existing stream.
  options.memory_storage = true;
  Status status = EnsureStream(js(), options);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
}

TEST_F(StreamTest, EnsureFromManyThreadsAtOnce) {
  StreamOptions options;
  options.name = "RACE";
  options.subjects.prefix = "race.events";
  std::vector<Status> results(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = EnsureStream(js(), options); });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& status : results) EXPECT_TRUE(status.ok()) << status;
  // Racing updaters converge on the new config too.
  options.max_age = std::chrono::minutes(30);
  threads.clear();
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = EnsureStream(js(), options); });
  }
  for (auto& thread : threads) thread.join();
  for (const Status& status : results) EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(ConfiguredMaxAgeNanos(js(), options.name), int64_t{30} * 60 * 1'000'000'000);
}

TEST_F(StreamTest, StateCountsMessages) {
  StreamOptions options;
  auto missing = GetStreamState(js(), options.name);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  ASSERT_TRUE(EnsureStream(js(), options).ok());
  auto empty = GetStreamState(js(), options.name);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->messages, 0u);
  EXPECT_EQ(empty->last_seq, 0u);

  for (int i = 0; i < 5; ++i) {
    jsPubAck* ack = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const std::string subject = options.subjects.Events("meta-llama/Llama-3.1-8B", "node-1");
    ASSERT_EQ(js_Publish(&ack, js(), subject.c_str(), "x", 1, nullptr, &code), NATS_OK);
    EXPECT_EQ(ack->Sequence, static_cast<uint64_t>(i + 1));
    jsPubAck_Destroy(ack);
  }
  auto state = GetStreamState(js(), options.name);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->messages, 5u);
  EXPECT_EQ(state->first_seq, 1u);
  EXPECT_EQ(state->last_seq, 5u);
  EXPECT_GT(state->bytes, 0u);
}

// Reproduction (issue #21): one agent started with --stream-max-bytes 20000
// cut the shared stream from 213 messages to 18. A process that does not own
// the settings creates a missing stream but never changes an existing one; it
// reports what differs.
TEST_F(StreamTest, ANonOwnerNeverChangesTheStream) {
  StreamOptions router;
  router.max_age = std::chrono::hours(48);
  ASSERT_TRUE(EnsureStream(js(), router).ok());
  const std::string subject = router.subjects.Events("m", "node-1");
  const std::string payload(200, 'x');
  for (int i = 0; i < 213; ++i) {
    jsPubAck* ack = nullptr;
    ASSERT_EQ(
        js_Publish(&ack, js(), subject.c_str(), payload.data(), payload.size(), nullptr, nullptr),
        NATS_OK);
    jsPubAck_Destroy(ack);
  }
  StreamOptions agent;  // defaults: 24h, unlimited bytes
  agent.max_bytes = 20000;
  agent.owns_settings = false;
  std::vector<std::string> mismatch;
  ASSERT_TRUE(EnsureStream(js(), agent, &mismatch).ok());
  auto state = GetStreamState(js(), router.name);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->messages, 213u);
  EXPECT_EQ(ConfiguredMaxAgeNanos(js(), router.name), int64_t{48} * 3600 * 1'000'000'000);
  ASSERT_EQ(mismatch.size(), 2u);
  EXPECT_EQ(mismatch[0], "max_age_ms (stream 172800000, flags 86400000)");
  EXPECT_EQ(mismatch[1], "max_bytes (stream -1, flags 20000)");

  // A missing stream is still created by a non-owner, with its flags.
  StreamOptions other = agent;
  other.name = "OTHER";
  other.subjects.prefix = "other.events";
  mismatch.clear();
  ASSERT_TRUE(EnsureStream(js(), other, &mismatch).ok());
  EXPECT_TRUE(mismatch.empty());
  EXPECT_TRUE(GetStreamState(js(), "OTHER").ok());
  // The owner still applies its settings.
  ASSERT_TRUE(EnsureStream(js(), agent.owns_settings ? agent : StreamOptions{}).ok());
  EXPECT_EQ(ConfiguredMaxAgeNanos(js(), router.name), int64_t{24} * 3600 * 1'000'000'000);
}

TEST_F(StreamTest, ReplicasOnStandaloneServerIsFailedPrecondition) {
  StreamOptions options;
  options.replicas = 3;
  Status status = EnsureStream(js(), options);
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_NE(status.message().find("eplicas"), std::string::npos) << status;
}

TEST_F(StreamTest, UnreachableIsUnavailable) {
  server_->Kill();
  StreamOptions options;
  Status status = EnsureStream(js(), options);
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
}

TEST(StreamValidateTest, NamesTheFlag) {
  StreamOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.name = "a.b";
  EXPECT_NE(options.Validate().message().find("--stream"), std::string::npos);
  options = StreamOptions();
  options.replicas = 0;
  EXPECT_NE(options.Validate().message().find("--stream-replicas"), std::string::npos);
  options = StreamOptions();
  options.max_age = std::chrono::minutes(1);
  EXPECT_NE(options.Validate().message().find("--stream-duplicate-window"), std::string::npos);
}

TEST(FromNatsTest, Codes) {
  EXPECT_TRUE(FromNats(NATS_OK, "x").ok());
  EXPECT_TRUE(absl::IsUnavailable(FromNats(NATS_TIMEOUT, "x")));
  EXPECT_TRUE(absl::IsUnavailable(FromNats(NATS_NO_SERVER, "x")));
  EXPECT_TRUE(absl::IsUnavailable(FromNats(NATS_CONNECTION_CLOSED, "x")));
  EXPECT_TRUE(absl::IsUnavailable(FromNats(NATS_NOT_YET_CONNECTED, "x")));
  EXPECT_TRUE(absl::IsPermissionDenied(FromNats(NATS_NOT_PERMITTED, "x")));
  EXPECT_TRUE(absl::IsPermissionDenied(FromNats(NATS_CONNECTION_AUTH_FAILED, "x")));
  EXPECT_TRUE(absl::IsNotFound(FromNats(NATS_NOT_FOUND, "x")));
  EXPECT_TRUE(absl::IsNotFound(FromNats(NATS_ERR, "x", JSStreamNotFoundErr)));
  EXPECT_TRUE(absl::IsInternal(FromNats(NATS_ERR, "x")));
  EXPECT_NE(FromNats(NATS_TIMEOUT, "publish").message().find("publish"), std::string::npos);
}

TEST(ClusterTest, ReplicatedStreamSurvivesOneNode) {
  auto cluster = testing::NatsCluster::Start();
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  NatsOptions options;
  options.url = (*cluster)->urls();
  auto connection = Connection::Connect(options, nullptr, "agent", {}, false);
  ASSERT_TRUE(connection.ok()) << connection.status();
  jsCtx* js = (*connection)->jetstream();
  StreamOptions stream;
  stream.replicas = 3;
  ASSERT_TRUE(EnsureStream(js, stream).ok());
  ASSERT_TRUE(EnsureStream(js, stream).ok());
  // Five replicas on three servers: refused with the server's reason.
  StreamOptions five = stream;
  five.replicas = 5;
  Status refused = EnsureStream(js, five);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;

  auto publish = [&](int count) {
    int ok = 0;
    for (int i = 0; i < count; ++i) {
      jsPubAck* ack = nullptr;
      jsErrCode code = static_cast<jsErrCode>(0);
      const std::string subject = stream.subjects.Events("m", "n");
      if (js_Publish(&ack, js, subject.c_str(), "x", 1, nullptr, &code) == NATS_OK) ++ok;
      jsPubAck_Destroy(ack);
    }
    return ok;
  };
  ASSERT_EQ(publish(10), 10);
  // Kill the server the client is on or not: either way two of three remain,
  // a quorum; the stream leader is re-elected if needed.
  (*cluster)->Kill(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int published = 0;
  while (published < 10 && std::chrono::steady_clock::now() < deadline) {
    published += publish(1);
    if (published < 10) std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(published, 10);
  auto state = GetStreamState(js, stream.name);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->messages, 20u);
  ASSERT_TRUE((*cluster)->Restart(0).ok());
}

}  // namespace
}  // namespace kvindex::nats
