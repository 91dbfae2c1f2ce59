// JetStreamPublisher against a real nats-server: events larger than the
// server's max_payload (1 MB by default) are split into consecutive pieces
// that each fit, so nothing is refused and retried forever, and a router
// applying the pieces holds exactly what the whole events meant. Refusals
// (a full stream, a deleted one) back off instead of resending in a hot
// loop; a "duplicate" answer to a first send (an id taken in advance by
// another publisher) is a loss that fails the source closed and resyncs it;
// no callback reaches the publisher or the resync listener after Stop. The
// JetStream log reader's fault handling is tested here too (same fixture).
#include "shared/publish/jetstream_publisher.h"
#include "shared/publish/resync_listener.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "shared/consume/jetstream_log_reader.h"
#include "shared/index/kv_index.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/nats/testing/nats_server.h"
#include "shared/nats/testing/stream_fixture.h"

namespace kvindex {
namespace {

// A nats-server, a connection to it and the default stream, for each test.
class JetStreamPublisherTest : public nats::testing::StreamTest {
 protected:
  // The value of counter/gauge `name` with `label`=`value` ("" = any), -1 when absent.
  double Metric(const std::string& name, const std::string& label = "",
                const std::string& value = "") {
    for (const auto& family : registry_.Collect()) {
      if (family.name != name) continue;
      for (const auto& metric : family.metric) {
        bool match = label.empty();
        for (const auto& l : metric.label) match |= l.name == label && l.value == value;
        if (!match) continue;
        return family.type == prometheus::MetricType::Gauge ? metric.gauge.value
                                                            : metric.counter.value;
      }
    }
    return -1;
  }

  // Flush, within `timeout`: its status, or DeadlineExceeded (the publisher
  // stopped, which releases Flush) when it did not return by then.
  static Status FlushWithin(JetStreamPublisher& publisher, std::chrono::seconds timeout) {
    auto flushed = std::async(std::launch::async, [&] { return publisher.Flush(); });
    if (flushed.wait_for(timeout) == std::future_status::ready) return flushed.get();
    publisher.Stop();
    flushed.get().IgnoreError();  // FailedPrecondition: stopped
    return absl::DeadlineExceededError("Flush did not return");
  }

  // Every message of `node` in the stream, in order, decoded.
  std::vector<consume::LogBatch> ReadNode(const std::string& node) {
    consume::JetStreamLogOptions log_options;
    log_options.stream = stream_.name;
    log_options.subjects = stream_.subjects.All();
    consume::JetStreamLogReader reader(connection_->jetstream(), log_options);
    std::vector<consume::LogBatch> out;
    if (!reader.Open(1).ok()) return out;
    auto state = nats::GetStreamState(connection_->jetstream(), stream_.name);
    if (!state.ok()) return out;
    uint64_t position = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (position < state->last_seq && std::chrono::steady_clock::now() < deadline) {
      consume::LogBatch batch;
      if (!reader.Read(&batch, 4096, std::chrono::milliseconds(100)).ok()) continue;
      for (size_t m = 0; m < batch.messages.size(); ++m) {
        position = batch.messages[m].position;
        if (batch.messages[m].invalid || batch.messages[m].header.agent != node) continue;
        consume::LogBatch& one = out.emplace_back();
        auto events = batch.Events(m);
        one.events.assign(events.begin(), events.end());
        one.messages.push_back(batch.messages[m]);
        one.messages.back().end = one.events.size();
      }
    }
    return out;
  }
};

// The codec writes a sequenced header with whatever agent it is given; the
// publisher is what guarantees one (the decoder refuses a sequenced message
// without it).
TEST(JetStreamPublisherOptionsTest, AnEmptyNodeIsRefused) {
  JetStreamPublisherOptions options;
  options.node = "";
  const Status status = options.Validate();
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("node id is empty"), std::string_view::npos);
  options.node = "node-a";
  EXPECT_TRUE(options.Validate().ok()) << options.Validate().message();
}

// docs/events.md "Numbering": besides msg_seq (1, 2, 3, ... over every
// message), each subject of the agent (a model's, the agent's control one)
// is numbered 1, 2, 3, ... on its own, so a router reading one model's
// subject sees no holes where the other model's messages are.
TEST_F(JetStreamPublisherTest, EachSubjectIsNumberedOnItsOwn) {
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.max_delay = std::chrono::microseconds(1000);
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher.Start().ok());
  const char* const order[] = {"a", "b", "b", "", "a", "b", "a", ""};
  for (size_t i = 0; i < std::size(order); ++i) {
    PlacementEvent event;
    event.kind = *order[i] == 0 ? PlacementKind::kHeartbeat : PlacementKind::kStored;
    event.model = order[i];
    event.agent = "node-a";
    event.source = {"w0", 0};
    event.block_size = 16;
    event.block_hashes = {i + 1};
    ASSERT_TRUE(publisher.Publish({&event, 1}).ok());
    ASSERT_TRUE(publisher.Flush().ok());  // one message each
  }
  publisher.Stop();
  std::map<std::string, std::vector<uint64_t>> by_subject;
  std::vector<uint64_t> msg_seqs;
  for (const consume::LogBatch& message : ReadNode("node-a")) {
    by_subject[message.messages[0].subject].push_back(message.messages[0].header.subject_seq);
    msg_seqs.push_back(message.messages[0].header.msg_seq);
  }
  EXPECT_EQ(msg_seqs, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  const std::vector<uint64_t> three = {1, 2, 3};
  EXPECT_EQ(by_subject[stream_.subjects.Events("a", "node-a")], three);
  EXPECT_EQ(by_subject[stream_.subjects.Events("b", "node-a")], three);
  EXPECT_EQ(by_subject[stream_.subjects.Agent("node-a")], (std::vector<uint64_t>{1, 2}));
}

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
  ASSERT_TRUE(FlushWithin(publisher, std::chrono::seconds(30)).ok())
      << "messages over max_payload are refused and retried forever";
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

// A burst of small events (a snapshot, a backlog after an outage) fills one
// batch with thousands of them: the batch, sealed on estimated sizes, must
// still fit the server's max_payload once encoded. Each event here is a
// one-block SGLang store with full 64-bit hashes (the reliability matrix's
// nats_one_killed: a message of 1,056,797 bytes refused by the client for
// every resend, the agent silent, every router expiring it).
TEST_F(JetStreamPublisherTest, BatchesOfSmallEventsFitMaxPayloadOnceEncoded) {
  std::mt19937_64 random(24);
  std::vector<PlacementEvent> events(12000);
  for (size_t i = 0; i < events.size(); ++i) {
    PlacementEvent& event = events[i];
    event.model = "sim-a";
    event.source = {"w2", 0};
    event.agent = "node-a";
    event.event_id = random();
    event.timestamp_ns = random();
    event.block_size = 16;
    event.parent_hash = random();
    event.block_hashes = {random()};
    event.sglang_hashes = {random()};
  }
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.max_delay = std::chrono::seconds(5);  // one burst, sealed by size
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher.Start().ok());
  ASSERT_TRUE(publisher.Publish(events).ok());
  ASSERT_TRUE(FlushWithin(publisher, std::chrono::seconds(20)).ok())
      << "a message over max_payload is never sent";
  publisher.Stop();
  size_t read = 0, messages = 0;
  for (const consume::LogBatch& batch : ReadNode("node-a")) {
    ++messages;
    for (const PlacementEvent& event : batch.events) {
      ASSERT_LT(read, events.size());
      EXPECT_EQ(event.block_hashes, events[read].block_hashes);
      EXPECT_EQ(event.sglang_hashes, events[read].sglang_hashes);
      ++read;
    }
  }
  EXPECT_EQ(read, events.size());
  EXPECT_GE(messages, 3u);  // ~2.3 MB encoded
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

PlacementEvent Event(PlacementKind kind, std::string model, std::vector<uint64_t> hashes) {
  PlacementEvent e;
  e.kind = kind;
  e.model = std::move(model);
  e.source = {"w0", 0};
  e.agent = "node-b";
  e.block_size = 16;
  e.block_hashes = std::move(hashes);
  return e;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Issue #21: node-b's next Nats-Msg-Ids published in advance by someone
// else. JetStream answers "duplicate" to node-b's real messages; the agent
// must see a loss there (not an acknowledgement), fail the source closed and
// republish it as a snapshot, so the stream ends holding node-b's truth.
TEST_F(JetStreamPublisherTest, DuplicateAnswerToAFirstSendIsALossAndTheSourceIsResynced) {
  constexpr uint64_t kIncarnation = 42;
  constexpr int kTaken = 3;
  const std::string subject = stream_.subjects.Events("m", "node-b");
  for (int seq = 1; seq <= kTaken; ++seq) {
    natsMsg* msg = nullptr;
    ASSERT_EQ(natsMsg_Create(&msg, subject.c_str(), nullptr, "x", 1), NATS_OK);
    const std::string id = "node-b:" + std::to_string(kIncarnation) + ":" + std::to_string(seq);
    ASSERT_EQ(natsMsgHeader_Set(msg, "Nats-Msg-Id", id.c_str()), NATS_OK);
    jsPubAck* ack = nullptr;
    ASSERT_EQ(js_PublishMsg(&ack, connection_->jetstream(), msg, nullptr, nullptr), NATS_OK);
    jsPubAck_Destroy(ack);
    natsMsg_Destroy(msg);
  }

  JetStreamPublisherOptions options;
  options.node = "node-b";
  options.incarnation = kIncarnation;
  options.subjects = stream_.subjects;
  options.max_delay = std::chrono::microseconds(200);
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  std::atomic<int> snapshots{0};
  publisher.SetResyncHandler([&](const ResyncRequest& request) {
    bool w0 = request.all;
    for (const SourceKey& source : request.sources) w0 |= source.worker == "w0";
    if (!w0) return;
    // The agent pipeline's snapshot: a clear, then everything the engine holds.
    ASSERT_TRUE(
        publisher
            .Publish(std::vector<PlacementEvent>{Event(PlacementKind::kCleared, "m", {}),
                                                 Event(PlacementKind::kStored, "m", {1, 2, 3})})
            .ok());
    snapshots.fetch_add(1);
  });
  ASSERT_TRUE(publisher.Start().ok());
  ASSERT_TRUE(
      publisher.Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "m", {1})}).ok());
  ASSERT_TRUE(publisher.Flush().ok());
  ASSERT_TRUE(WaitUntil([&] { return snapshots.load() > 0; }, std::chrono::seconds(10)))
      << "a message JetStream dropped as a duplicate was counted as acknowledged";
  ASSERT_TRUE(publisher.Flush().ok());
  // Every later message lands (ids past the taken ones); let requests settle.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return publisher.Flush().ok() && publisher.buffered_bytes() == 0 &&
               Metric("kvindex_agent_nats_resync_requests_total") == snapshots.load();
      },
      std::chrono::seconds(10)));
  publisher.Stop();
  EXPECT_EQ(publisher.lost(), static_cast<uint64_t>(kTaken));
  EXPECT_EQ(Metric("kvindex_agent_nats_messages_lost_total"), kTaken);

  // node-b's messages in the stream, applied in order: w0 holds 1, 2, 3.
  std::set<uint64_t> held;
  uint64_t last_msg_seq = 0;
  for (const consume::LogBatch& message : ReadNode("node-b")) {
    EXPECT_GT(message.messages[0].header.msg_seq, static_cast<uint64_t>(kTaken));
    EXPECT_GT(message.messages[0].header.msg_seq, last_msg_seq);
    last_msg_seq = message.messages[0].header.msg_seq;
    for (const PlacementEvent& event : message.events) {
      if (event.kind == PlacementKind::kCleared) held.clear();
      if (event.kind == PlacementKind::kStored)
        held.insert(event.block_hashes.begin(), event.block_hashes.end());
    }
  }
  EXPECT_EQ(held, (std::set<uint64_t>{1, 2, 3}));
}

// Issue #26.4: a stream that refuses every new message (max_msgs with
// discard new) gets one probe per backoff round, not the whole buffer again
// and again; the refusals are counted by reason, the stream is checked, and
// once it accepts again everything lands in order.
TEST_F(JetStreamPublisherTest, RefusedMessagesBackOffAndAreCountedByReason) {
  jsErrCode code = static_cast<jsErrCode>(0);
  ASSERT_EQ(js_DeleteStream(connection_->jetstream(), stream_.name.c_str(), nullptr, &code),
            NATS_OK);
  const std::string subjects = stream_.subjects.All();
  const char* subject_list[] = {subjects.c_str()};
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  config.Name = stream_.name.c_str();
  config.Subjects = subject_list;
  config.SubjectsLen = 1;
  config.Storage = js_MemoryStorage;
  config.MaxMsgs = 2;
  config.Discard = js_DiscardNew;
  jsStreamInfo* info = nullptr;
  ASSERT_EQ(js_AddStream(&info, connection_->jetstream(), &config, nullptr, &code), NATS_OK);
  jsStreamInfo_Destroy(info);

  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.retry_backoff_min = std::chrono::milliseconds(100);
  options.retry_backoff_max = std::chrono::milliseconds(800);
  std::atomic<int> checks{0};
  options.check_stream = [&] {
    checks.fetch_add(1);
    return nats::GetStreamState(connection_->jetstream(), stream_.name).status();
  };
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  std::atomic<int> resync_all{0};
  publisher.SetResyncHandler([&](const ResyncRequest& r) { resync_all += r.all ? 1 : 0; });
  ASSERT_TRUE(publisher.Start().ok());
  constexpr int kMessages = 10;  // one per model: one message each
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(publisher
                    .Publish(std::vector<PlacementEvent>{
                        Event(PlacementKind::kStored, "m" + std::to_string(i), {1})})
                    .ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  const double sent = Metric("kvindex_agent_nats_messages_sent_total");
  const double limits = Metric("kvindex_agent_nats_publish_failures_total", "reason", "limits");
  // Rounds at about 0.1, 0.3, 0.7, 1.5 s: a few probes after the first sends.
  EXPECT_GE(sent, kMessages);
  EXPECT_LE(sent, kMessages + 12) << "refused messages are resent in a hot loop";
  EXPECT_GE(limits, 2) << "refusals by a full stream not counted as 'limits'";
  EXPECT_GE(checks.load(), 1) << "the stream is not checked after a refusal";
  const double backoff = Metric("kvindex_agent_nats_retry_backoff_seconds");
  EXPECT_GE(backoff, 0.4);          // doubled per round (0.8 once four rounds failed)
  EXPECT_LE(backoff, 0.8);          // bounded by retry_backoff_max
  EXPECT_EQ(resync_all.load(), 0);  // not while the backlog is stuck

  // The stream accepts again: the next probe lands, the window reopens,
  // everything is acknowledged and every source resynced.
  config.MaxMsgs = -1;
  ASSERT_EQ(js_UpdateStream(&info, connection_->jetstream(), &config, nullptr, &code), NATS_OK);
  jsStreamInfo_Destroy(info);
  auto flushed = std::async(std::launch::async, [&] { return publisher.Flush(); });
  const bool done = flushed.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!done) publisher.Stop();
  ASSERT_TRUE(done);
  ASSERT_TRUE(flushed.get().ok());
  EXPECT_TRUE(WaitUntil([&] { return resync_all.load() > 0; }, std::chrono::seconds(5)));
  EXPECT_TRUE(WaitUntil([&] { return Metric("kvindex_agent_nats_retry_backoff_seconds") == 0; },
                        std::chrono::seconds(5)));
  publisher.Stop();
  auto state = nats::GetStreamState(connection_->jetstream(), stream_.name);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->messages, static_cast<uint64_t>(kMessages));
  const auto messages = ReadNode("node-a");
  ASSERT_EQ(messages.size(), static_cast<size_t>(kMessages));
  for (size_t i = 0; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].messages[0].header.msg_seq, i + 1);
  }
}

// Issue #26.4: a deleted stream answers "no responders"; the publisher backs
// off, counts it as no_stream, and its stream check creates the stream again.
TEST_F(JetStreamPublisherTest, ADeletedStreamIsCheckedAndCreatedAgain) {
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.retry_backoff_min = std::chrono::milliseconds(50);
  options.check_stream = [&] { return nats::EnsureStream(connection_->jetstream(), stream_); };
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher.Start().ok());
  ASSERT_TRUE(
      publisher.Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "m", {1})}).ok());
  ASSERT_TRUE(publisher.Flush().ok());
  jsErrCode code = static_cast<jsErrCode>(0);
  ASSERT_EQ(js_DeleteStream(connection_->jetstream(), stream_.name.c_str(), nullptr, &code),
            NATS_OK);
  ASSERT_TRUE(
      publisher.Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "m", {2})}).ok());
  auto flushed = std::async(std::launch::async, [&] { return publisher.Flush(); });
  const bool done = flushed.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!done) publisher.Stop();
  ASSERT_TRUE(done) << "a deleted stream is never created again";
  ASSERT_TRUE(flushed.get().ok());
  EXPECT_GE(Metric("kvindex_agent_nats_publish_failures_total", "reason", "no_stream"), 1);
  EXPECT_GE(Metric("kvindex_agent_nats_stream_checks_total", "result", "ok"), 1);
  publisher.Stop();
  auto state = nats::GetStreamState(connection_->jetstream(), stream_.name);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->messages, 1u);
}

// Issues #26.6 and #26.10: Stop returns once no acknowledgement callback
// runs or can start (one still running is waited for: nothing reaches the
// publisher after Stop), and a stopped publisher answers FailedPrecondition
// (for good), not Unavailable (retry).
TEST_F(JetStreamPublisherTest, NoCallbackReachesAStoppedPublisher) {
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  std::atomic<bool> first{true}, entered{false}, finished{false};
  options.ack_observer = [&] {
    if (!first.exchange(false)) return;
    entered.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a slow callback
    finished.store(true);
  };
  auto publisher = std::make_unique<JetStreamPublisher>(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher->Start().ok());
  const std::vector<PlacementEvent> events = {Event(PlacementKind::kStored, "m", {1})};
  ASSERT_TRUE(publisher->Publish(events).ok());
  ASSERT_TRUE(WaitUntil([&] { return entered.load(); }, std::chrono::seconds(10)));
  publisher->Stop();
  EXPECT_TRUE(finished.load()) << "Stop returned while an acknowledgement callback still ran";
  EXPECT_EQ(publisher->Publish(events).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(publisher->Flush().ok());  // what it took was acknowledged before Stop
  publisher.reset();
}

// Shutdown(deadline) sends what is buffered and waits for it until the
// deadline: OK when all of it was stored, DeadlineExceeded naming what was
// dropped when the stream refuses.
TEST_F(JetStreamPublisherTest, ShutdownFlushesUntilItsDeadline) {
  JetStreamPublisherOptions options;
  options.node = "node-a";
  options.subjects = stream_.subjects;
  options.max_delay = std::chrono::seconds(10);  // only Shutdown seals
  JetStreamPublisher publisher(connection_->raw(), options, &registry_);
  ASSERT_TRUE(publisher.Start().ok());
  ASSERT_TRUE(publisher
                  .Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "a", {1}),
                                                       Event(PlacementKind::kStored, "b", {2})})
                  .ok());
  EXPECT_TRUE(publisher.Shutdown(std::chrono::steady_clock::now() + std::chrono::seconds(10)).ok());
  auto state = nats::GetStreamState(connection_->jetstream(), stream_.name);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->messages, 2u);

  jsErrCode code = static_cast<jsErrCode>(0);
  ASSERT_EQ(js_DeleteStream(connection_->jetstream(), stream_.name.c_str(), nullptr, &code),
            NATS_OK);
  JetStreamPublisher refused(connection_->raw(), options, &registry_);
  ASSERT_TRUE(refused.Start().ok());
  ASSERT_TRUE(
      refused.Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "a", {1})}).ok());
  const auto start = std::chrono::steady_clock::now();
  const Status status = refused.Shutdown(start + std::chrono::milliseconds(500));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("1 placement messages"), std::string_view::npos) << status;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // Nothing ever handed to the client library (the stream never ready):
  // stopping must not touch its pending list (cnats has none yet: it crashed).
  JetStreamPublisher unsent(connection_->raw(), options, &registry_);
  unsent.SetStreamReady(false);
  ASSERT_TRUE(unsent.Start().ok());
  ASSERT_TRUE(
      unsent.Publish(std::vector<PlacementEvent>{Event(PlacementKind::kStored, "a", {1})}).ok());
  EXPECT_EQ(
      unsent.Shutdown(std::chrono::steady_clock::now() + std::chrono::milliseconds(100)).code(),
      absl::StatusCode::kDeadlineExceeded);
}

// Issue #26.6: ResyncListener::Stop returns only after a handler that is
// running has returned, so what the handler names may go right after.
TEST_F(JetStreamPublisherTest, ResyncListenerStopWaitsForARunningHandler) {
  std::atomic<bool> entered{false}, finished{false};
  const std::string subject = stream_.subjects.Expire("node-a");
  ResyncListener listener(connection_->jetstream(), stream_.name, subject, [&] {
    entered.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    finished.store(true);
  });
  ASSERT_TRUE(listener.Start().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!entered.load() && std::chrono::steady_clock::now() < deadline) {
    jsPubAck* ack = nullptr;
    ASSERT_EQ(js_Publish(&ack, connection_->jetstream(), subject.c_str(), "r", 1, nullptr, nullptr),
              NATS_OK);
    jsPubAck_Destroy(ack);
    WaitUntil([&] { return entered.load(); }, std::chrono::seconds(1));
  }
  ASSERT_TRUE(entered.load());
  listener.Stop();
  EXPECT_TRUE(finished.load()) << "Stop returned while the handler still ran";
}

// Issue #26.3: a read that fails after it took messages hands them over and
// reports the failure on the next call (NextMsg fault injected), so no log
// position is lost.
TEST_F(JetStreamPublisherTest, AReadThatFailsMidBatchHandsOverWhatItTook) {
  constexpr uint64_t kMessages = 10;
  const std::string subject = stream_.subjects.Events("m", "node-b");
  for (uint64_t seq = 1; seq <= kMessages; ++seq) {
    std::string data;
    codec::EncodePlacementBatch(
        std::vector<PlacementEvent>{Event(PlacementKind::kStored, "m", {seq})}, &data,
        {.agent = "node-b", .incarnation = 1, .msg_seq = seq});
    jsPubAck* ack = nullptr;
    ASSERT_EQ(js_Publish(&ack, connection_->jetstream(), subject.c_str(), data.data(),
                         static_cast<int>(data.size()), nullptr, nullptr),
              NATS_OK);
    jsPubAck_Destroy(ack);
  }

  consume::JetStreamLogOptions options;
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
  consume::JetStreamLogReader reader(connection_->jetstream(), options);
  ASSERT_TRUE(reader.Open(1).ok());

  // As the apply loop does: a fresh batch per read, an error's batch unused.
  std::vector<uint64_t> positions;
  int errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (positions.size() < kMessages && std::chrono::steady_clock::now() < deadline) {
    consume::LogBatch batch;
    const Status status = reader.Read(&batch, 4096, std::chrono::milliseconds(200));
    if (!status.ok()) {
      ++errors;
      EXPECT_TRUE(batch.messages.empty()) << "an error hands nothing over";
      continue;
    }
    for (const consume::LogBatch::Message& message : batch.messages) {
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
}  // namespace kvindex
