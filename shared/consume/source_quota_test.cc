// The fleet-wide source quota (docs/security.md, "A fleet-wide source
// quota"; issue #21): made-up sources of many nodes cannot lock another node
// out of a model, the number of live nodes is bounded, a refusal drops only
// the refused sources' events, and the decision is the same on a replica
// restored from a checkpoint as on one that applied the whole log.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shared/consume/apply_loop.h"
#include "shared/consume/testing/replica_checks.h"
#include "shared/consume/testing/scripted_reader.h"
#include "shared/index/kv_index.h"

namespace kvindex::consume {
namespace {

constexpr uint64_t kLogNow = 1'700'000'000'000'000'000ull;  // stored_ns of every message

PlacementEvent Store(const std::string& node, const std::string& model, const std::string& worker,
                     uint64_t hash) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = model;
  e.source = {worker, 0};
  e.agent = node;
  e.timestamp_ns = kLogNow;
  e.block_size = 4;
  e.block_hashes = {hash};
  return e;
}

// A log written by several nodes, each numbering its own messages, read by
// one replica (index + apply loop).
struct Fleet {
  testing::ScriptedReader reader;
  uint64_t position = 0;
  absl::flat_hash_map<std::string, uint64_t> seq;

  void Send(const std::string& node, std::vector<PlacementEvent> events) {
    const codec::MessageHeader header{
        .agent = node, .incarnation = kLogNow - 1000, .msg_seq = ++seq[node]};
    // A model subject carries its model's events only (AgentTable).
    const std::string subject = "kvindex.events." + events.front().model + "." + node;
    reader.Add(++position, header, std::move(events), false, subject, kLogNow);
  }
  void Expire(const std::string& node) {
    PlacementEvent e;
    e.kind = PlacementKind::kAgentExpired;
    e.agent = node;
    e.heartbeat_seq = position;
    reader.Add(++position, {}, {e}, false, "kvindex.events._expire." + node, kLogNow);
  }
  // `node` stores one block into `count` made-up workers of `model`.
  void Flood(const std::string& node, const std::string& model, int count, uint64_t first_hash) {
    std::vector<PlacementEvent> events;
    for (int i = 0; i < count; ++i) {
      events.push_back(Store(node, model, node + "-fake" + std::to_string(i), first_hash + i));
    }
    Send(node, std::move(events));
  }
};

struct Replica {
  index::KvIndex index;
  RouterProbe probe;
  std::unique_ptr<ApplyLoop> loop;

  void Run(testing::ScriptedReader* reader, ApplyOptions options = {}) {
    if (loop == nullptr) {
      loop = std::make_unique<ApplyLoop>(reader, &index, &probe, std::move(options));
    }
    ASSERT_TRUE(loop->Start().ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!loop->CaughtUp()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    loop->Stop();
  }
  std::vector<std::string> Holders(const std::string& model, uint64_t hash) const {
    return testing::Holders(index, model, hash);
  }
  double Refused(const std::string& reason) const {
    return testing::RefusedMessages(probe, reason);
  }
  size_t SourcesOf(const std::string& model, const std::string& prefix) const {
    std::vector<SourceKey> keys;
    index.ModelSources(model, &keys);
    size_t n = 0;
    for (const SourceKey& key : keys) n += key.worker.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  }
};

// The flood: seventeen nodes of 256 made-up workers each (within the
// per-node bound) used to take all 4,096 source ids of model "m", and nodes
// storing into "m" afterwards were left out of the index
// (over_source_limit). One log, read by a replica from its start and by one
// restored from a checkpoint taken after the quota began to refuse.
class SourceQuotaFlood : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static Fleet log;
    log.Send("honest-a", {Store("honest-a", "m", "a0", 1)});  // before the flood
    uint64_t checkpoint = 0;
    for (int n = 0; n < 17; ++n) {
      const std::string node = "flood-" + std::to_string(100 + n);
      log.Flood(node, "m", 256, 1'000'000 * (n + 1));
      if (n == 13) checkpoint = log.position;
    }
    // The last flooder's store into another model is its own business.
    log.Send("flood-116", {Store("flood-116", "other", "flood-116-fake0", 7)});
    // A late node: four sources fit its share; late4's store, removal and
    // second store are all dropped; late0's second store applies.
    std::vector<PlacementEvent> late;
    for (int i = 0; i < 4; ++i) {
      late.push_back(Store("late", "m", "late" + std::to_string(i), 50'000 + i));
    }
    PlacementEvent removed = Store("late", "m", "late4", 60'000);
    removed.kind = PlacementKind::kRemoved;
    late.push_back(Store("late", "m", "late4", 60'000));
    late.push_back(removed);
    late.push_back(Store("late", "m", "late4", 60'001));
    late.push_back(Store("late", "m", "late0", 50'100));
    log.Send("late", std::move(late));
    log.Send("honest-b", {Store("honest-b", "m", "b0", 2), Store("honest-b", "m", "b1", 3)});
    log.Send("honest-a", {Store("honest-a", "m", "a0", 4)});

    whole_ = new Replica;
    whole_->Run(&log.reader);

    // A checkpoint of a replica that read up to `checkpoint`, restored.
    static testing::ScriptedReader first_part;
    LogBatch batch;
    ASSERT_TRUE(log.reader.Open(1).ok());
    ASSERT_TRUE(log.reader.Read(&batch, 1 << 20, std::chrono::milliseconds(0)).ok());
    for (size_t m = 0; m < batch.messages.size(); ++m) {
      const LogBatch::Message& message = batch.messages[m];
      if (message.position > checkpoint) break;
      const auto events = batch.Events(m);
      first_part.Add(message.position, message.header, {events.begin(), events.end()}, false,
                     message.subject, message.stored_ns);
    }
    before_ = new Replica;
    before_->Run(&first_part);
    restored_ = new Replica;
    before_->index.ForEachRun([](std::string_view model, const SourceKey& source, Tier tier,
                                 std::span<const uint64_t> hashes) {
      restored_->index.RestoreRun(model, source, tier, hashes, 4);
    });
    restored_->index.RestoreAppliedSeq(checkpoint);
    restored_->loop = std::make_unique<ApplyLoop>(&log.reader, &restored_->index, &restored_->probe,
                                                  ApplyOptions{});
    restored_->loop->agents().Restore(before_->loop->agents().Agents(),
                                      std::chrono::steady_clock::now());
    restored_->Run(&log.reader);
  }
  static void TearDownTestSuite() {
    delete whole_;
    delete before_;
    delete restored_;
  }
  static Replica* whole_;
  static Replica* before_;
  static Replica* restored_;
};
Replica* SourceQuotaFlood::whole_ = nullptr;
Replica* SourceQuotaFlood::before_ = nullptr;
Replica* SourceQuotaFlood::restored_ = nullptr;

// Each node past 3/4 of the model gets its share (1,024 / max_nodes = 4) at
// most, and nodes storing afterwards still apply; the flooders' other data
// is untouched, and no node is refused whole (no gap, no clear).
TEST_F(SourceQuotaFlood, ManyNodesCannotLockAnotherNodeOutOfAModel) {
  const Replica& r = *whole_;
  EXPECT_EQ(r.Holders("m", 1), std::vector<std::string>{"a0"});
  EXPECT_EQ(r.Holders("m", 2), std::vector<std::string>{"b0"});
  EXPECT_EQ(r.Holders("m", 3), std::vector<std::string>{"b1"});
  EXPECT_EQ(r.Holders("m", 4), std::vector<std::string>{"a0"});
  EXPECT_EQ(r.Holders("other", 7), std::vector<std::string>{"flood-116-fake0"});
  // a0 and 11 x 256 + 255 reach 3/4 (the twelfth flooder's last source is
  // refused); the next five flooders get their share (4) each, then late's
  // four, b0 and b1.
  EXPECT_EQ(r.index.ModelSources("m", nullptr), 3072 + 5 * 4 + 4 + 2u);
  EXPECT_EQ(r.SourcesOf("m", "flood-111"), 255u);
  EXPECT_EQ(r.SourcesOf("m", "flood-116"), 4u);
  EXPECT_EQ(r.Refused("model_sources_full"), 7);
  EXPECT_EQ(r.index.Stats().events_over_source_limit, 0u);
  for (const auto& agent : r.loop->agents().Agents()) EXPECT_EQ(agent.gaps, 0u) << agent.agent;
}

// A refused source's events of the model are all dropped (a store, its
// removal and a second store in one message: none applied), whatever the
// message's other sources do.
TEST_F(SourceQuotaFlood, ARefusedSourceIsDroppedWholeInItsMessage) {
  const Replica& r = *whole_;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r.Holders("m", 50'000 + i), std::vector<std::string>{"late" + std::to_string(i)});
  }
  EXPECT_TRUE(r.Holders("m", 60'000).empty());
  EXPECT_TRUE(r.Holders("m", 60'001).empty());
  EXPECT_EQ(r.Holders("m", 50'100), std::vector<std::string>{"late0"});
  EXPECT_EQ(r.SourcesOf("m", "late"), 4u);
  // Ownership does not depend on the index: late4 is late's all the same.
  EXPECT_EQ(r.loop->agents().Owner({"late4", 0}), "late");
}

// Every replica decides alike: one restored from another's checkpoint (its
// index entries and agent table) after the quota began to refuse ends with
// the same digest, and refuses what the first refused after that point.
TEST_F(SourceQuotaFlood, ARestoredReplicaDecidesTheSame) {
  EXPECT_EQ(restored_->index.Stats().digest, whole_->index.Stats().digest);
  EXPECT_EQ(restored_->index.ModelSources("m", nullptr), whole_->index.ModelSources("m", nullptr));
  EXPECT_EQ(restored_->Holders("m", 4), std::vector<std::string>{"a0"});
  EXPECT_GT(before_->Refused("model_sources_full"), 0);
  EXPECT_GT(restored_->Refused("model_sources_full"), 0);
  EXPECT_EQ(restored_->Refused("model_sources_full") + before_->Refused("model_sources_full"),
            whole_->Refused("model_sources_full"));
}

// At most max_nodes nodes are live: a further node's messages are refused
// whole (too_many_nodes) until one expires; then it is admitted and asked
// for a snapshot (its first messages were never applied).
TEST(SourceQuotaTest, LiveNodesAreBounded) {
  Fleet log;
  for (const char* node : {"n1", "n2", "n3"}) log.Send(node, {Store(node, "m", node, 1)});
  log.Send("n4", {Store("n4", "m", "n4", 4)});
  log.Expire("n1");
  log.Send("n4", {Store("n4", "m", "n4", 5)});
  ApplyOptions options;
  options.agents.max_nodes = 3;
  Replica r;
  r.Run(&log.reader, options);

  EXPECT_EQ(r.Refused("too_many_nodes"), 1);
  EXPECT_TRUE(r.Holders("m", 4).empty());
  EXPECT_EQ(r.Holders("m", 5), std::vector<std::string>{"n4"});
  EXPECT_EQ(r.Holders("m", 1), (std::vector<std::string>{"n2", "n3"}));  // n1 expired
  bool resync = false;
  for (const auto& request : r.loop->agents().TakeResyncRequests()) {
    resync |= request.agent == "n4";
  }
  EXPECT_TRUE(resync);
}

}  // namespace
}  // namespace kvindex::consume
