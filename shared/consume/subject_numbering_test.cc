// Per-subject numbering (docs/events.md, "Numbering"; docs/scaling.md,
// "How kvindex shards past one stream"): an agent numbers each of its
// subjects on its own, and gaps are judged per (agent, subject), so a router
// given only model "a"'s subject, the control subject and the expiry subject
// (FilteredLogReader) sees no holes where model "b"'s messages were, and
// judges model "a"'s state exactly as a router reading every message: same
// holders, same digest, whatever is lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shared/consume/apply_loop.h"
#include "shared/consume/testing/replica_checks.h"
#include "shared/consume/testing/scripted_reader.h"
#include "shared/consume/testing/wait_applied.h"
#include "shared/index/kv_index.h"
#include "shared/index/testing/events.h"

namespace kvindex::consume {
namespace {

using testing::ScriptedReader;

constexpr uint64_t kNow = 1'700'000'000'000'000'000ull;
constexpr uint64_t kIncarnation = kNow - 1000;

std::string Subject(const std::string& token) { return "kvindex.events." + token + ".node-a"; }

PlacementEvent Stored(const std::string& model, std::vector<uint64_t> hashes) {
  return index::testing::Stamped(
      "node-a", kNow, index::testing::Stored("w0", Tier::kDevice, std::move(hashes), 0, model));
}

PlacementEvent Heartbeat() {
  PlacementEvent e;
  e.kind = PlacementKind::kHeartbeat;
  e.agent = "node-a";
  e.lease_ms = 1000;
  e.sources = {{"w0", 0}};
  return e;
}

// One message of node-a's agent: on `token`'s subject ("_agent", "a", "b"),
// msg_seq over all its messages, subject_seq on that subject.
struct Sent {
  uint64_t position;
  std::string token;
  uint64_t msg_seq;
  uint64_t subject_seq;
  std::vector<PlacementEvent> events;
};

// A router replica: `tokens` are the subjects it is given (every one for an
// unfiltered router), `models` what it indexes.
struct Replica {
  ScriptedReader reader;
  index::KvIndex index;
  RouterProbe probe;
  std::unique_ptr<ApplyLoop> loop;

  void Feed(const std::vector<Sent>& log, const std::vector<std::string>& tokens) {
    for (const Sent& m : log) {
      if (std::find(tokens.begin(), tokens.end(), m.token) == tokens.end()) continue;
      reader.Add(m.position,
                 {.agent = "node-a",
                  .incarnation = kIncarnation,
                  .msg_seq = m.msg_seq,
                  .subject_seq = m.subject_seq},
                 m.events, false, Subject(m.token), kNow);
    }
  }
  void Run(std::vector<std::string> models) {
    ApplyOptions options;
    options.models = std::move(models);
    loop = std::make_unique<ApplyLoop>(&reader, &index, &probe, std::move(options));
    ASSERT_TRUE(loop->Start().ok());
    ASSERT_TRUE(testing::WaitUntilApplied(*loop));
    loop->Stop();
  }
  uint64_t Gaps() const {
    for (const auto& agent : loop->agents().Agents()) {
      if (agent.agent == "node-a") return agent.gaps;
    }
    return 0;
  }
};

// Both routers index model "a": the filtered one reads "a", "_agent" and
// "_expire" only, the other every subject. Returns after both applied `log`.
struct Pair {
  Replica filtered;
  Replica full;
  explicit Pair(const std::vector<Sent>& log) {
    filtered.Feed(log, {"_agent", "a", "_expire"});
    full.Feed(log, {"_agent", "a", "b", "_expire"});
    filtered.Run({"a"});
    full.Run({"a"});
  }
};

// node-a's start, then a and b interleaved: heartbeat, a1, b1, b2, a2.
std::vector<Sent> Interleaved() {
  return {
      {1, "_agent", 1, 1, {Heartbeat()}},    {2, "a", 2, 1, {Stored("a", {1})}},
      {3, "b", 3, 1, {Stored("b", {10})}},   {4, "b", 4, 2, {Stored("b", {11})}},
      {5, "a", 5, 2, {Stored("a", {2, 3})}},
  };
}

TEST(SubjectNumberingTest, AFilteredRouterSeesNoHoleWhereTheOtherModelsMessagesAre) {
  Pair pair(Interleaved());
  EXPECT_EQ(pair.filtered.Gaps(), 0u);  // by msg_seq it would see 2 -> 5
  EXPECT_EQ(pair.full.Gaps(), 0u);
  EXPECT_EQ(testing::Holders(pair.filtered.index, "a", 3), std::vector<std::string>{"w0"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
  EXPECT_EQ(pair.filtered.index.Stats().applied_seq, 5u);
}

// A lost model-b message (b's numbering jumps 1 -> 3) clears node-a's
// sources in model b only: model a keeps its blocks on every router, and the
// unfiltered router does not clear what the filtered one keeps.
TEST(SubjectNumberingTest, ALossOnAnotherModelsSubjectClearsThatModelOnly) {
  std::vector<Sent> log = Interleaved();
  log[3].subject_seq = 3;  // b2 lost; the next b message is numbered 3
  Pair pair(log);
  EXPECT_EQ(pair.filtered.Gaps(), 0u);
  EXPECT_EQ(pair.full.Gaps(), 1u);
  EXPECT_EQ(testing::Holders(pair.full.index, "a", 1), std::vector<std::string>{"w0"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);

  // Indexing b too, the unfiltered router cleared b's block 10 (before b's
  // message at 4, which it then applied) and kept model a.
  Replica both;
  both.Feed(log, {"_agent", "a", "b", "_expire"});
  both.Run({});
  EXPECT_TRUE(testing::Holders(both.index, "b", 10).empty());
  EXPECT_EQ(testing::Holders(both.index, "b", 11), std::vector<std::string>{"w0"});
  EXPECT_EQ(testing::Holders(both.index, "a", 1), std::vector<std::string>{"w0"});
}

// A lost model-a message: both routers clear model a before the next one.
TEST(SubjectNumberingTest, ALossOnTheModelsSubjectIsJudgedTheSameByBoth) {
  std::vector<Sent> log = Interleaved();
  log[4].subject_seq = 3;  // a2 lost
  Pair pair(log);
  EXPECT_EQ(pair.filtered.Gaps(), 1u);
  EXPECT_EQ(pair.full.Gaps(), 1u);
  EXPECT_TRUE(testing::Holders(pair.filtered.index, "a", 1).empty());
  EXPECT_EQ(testing::Holders(pair.filtered.index, "a", 2), std::vector<std::string>{"w0"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
}

// A lost control message (it may have held a clear of every model): every
// model of the agent is cleared, on both.
TEST(SubjectNumberingTest, ALossOnTheControlSubjectClearsEveryModel) {
  std::vector<Sent> log = Interleaved();
  log.push_back({6, "_agent", 6, 3, {Heartbeat()}});  // _agent 2 lost
  Pair pair(log);
  EXPECT_EQ(pair.filtered.Gaps(), 1u);
  EXPECT_EQ(pair.full.Gaps(), 1u);
  EXPECT_TRUE(testing::Holders(pair.filtered.index, "a", 2).empty());
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
}

// Late copies are stale per subject; a new incarnation on a model subject
// is followed there on its own.
TEST(SubjectNumberingTest, StaleAndRestartArePerSubject) {
  std::vector<Sent> log = Interleaved();
  log.push_back({6,
                 "a",
                 6,
                 2,
                 {index::testing::Stamped("node-a", kNow, index::testing::Cleared("w0", 0, "a"))}});
  Pair pair(log);
  EXPECT_EQ(testing::Holders(pair.filtered.index, "a", 2), std::vector<std::string>{"w0"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
}

// A model subject carries that model's events only: otherwise a router
// reading some models' subjects would miss them.
TEST(SubjectNumberingTest, AModelSubjectCarryingAnotherModelsEventsIsRefused) {
  Replica replica;
  replica.Feed({{1, "_agent", 1, 1, {Heartbeat()}},
                {2, "a", 2, 1, {Stored("b", {1})}},
                {3,
                 "a",
                 3,
                 2,
                 {index::testing::Stamped("node-a", kNow, index::testing::Cleared("w0", 0, ""))}}},
               {"_agent", "a"});
  replica.Run({});
  EXPECT_EQ(testing::RefusedMessages(replica.probe, "subject_mismatch"), 2);
  EXPECT_TRUE(testing::Holders(replica.index, "b", 1).empty());
}

}  // namespace
}  // namespace kvindex::consume
