// Ownership and liveness per model (docs/scaling.md, "Ownership and
// liveness"; review finding 1): the AgentTable's decisions about a model's
// messages (who owns a source, how many nodes are live against --max-nodes,
// how many sources a node owns) read only what every router indexing that
// model reads: the model's subject and the control subjects. A router given
// only model "a"'s subject, "_agent" and "_expire" (FilteredLogReader) and a
// router given every subject end with the same model-"a" state whatever
// another node does on model "b"'s subject.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
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

PlacementEvent Stored(const std::string& node, const std::string& worker, const std::string& model,
                      std::vector<uint64_t> hashes) {
  return index::testing::Stamped(
      node, kNow, index::testing::Stored(worker, Tier::kDevice, std::move(hashes), 0, model));
}

PlacementEvent Heartbeat(const std::string& node, std::vector<SourceKey> sources) {
  PlacementEvent e;
  e.kind = PlacementKind::kHeartbeat;
  e.agent = node;
  e.lease_ms = 1000;
  e.sources = std::move(sources);
  return e;
}

// One message: `node`'s on `token`'s subject ("_agent", "a", "b"), numbered
// 1, 2, ... per (node, subject) and per node.
struct Sent {
  std::string node;
  std::string token;
  std::vector<PlacementEvent> events;
};

struct Replica {
  ScriptedReader reader;
  index::KvIndex index;
  RouterProbe probe;
  std::unique_ptr<ApplyLoop> loop;

  // Feeds the messages of `log` on `tokens` (positions 1, 2, ... over the
  // whole log), then applies them indexing model "a".
  void Run(const std::vector<Sent>& log, const std::vector<std::string>& tokens,
           const AgentTableOptions& agents) {
    std::map<std::string, uint64_t> msg_seq;
    std::map<std::pair<std::string, std::string>, uint64_t> subject_seq;
    uint64_t position = 0;
    for (const Sent& m : log) {
      ++position;
      const uint64_t seq = ++msg_seq[m.node];
      const uint64_t subject = ++subject_seq[{m.node, m.token}];
      if (std::find(tokens.begin(), tokens.end(), m.token) == tokens.end()) continue;
      reader.Add(
          position,
          {.agent = m.node, .incarnation = kNow - 1000, .msg_seq = seq, .subject_seq = subject},
          m.events, false, "kvindex.events." + m.token + "." + m.node, kNow);
    }
    ApplyOptions options;
    options.models = {"a"};
    options.agents = agents;
    loop = std::make_unique<ApplyLoop>(&reader, &index, &probe, std::move(options));
    ASSERT_TRUE(loop->Start().ok());
    ASSERT_TRUE(testing::WaitUntilApplied(*loop));
    loop->Stop();
  }
};

struct Pair {
  Replica filtered;
  Replica full;
  Pair(const std::vector<Sent>& log, const AgentTableOptions& agents) {
    filtered.Run(log, {"_agent", "a", "_expire"}, agents);
    full.Run(log, {"_agent", "a", "b", "_expire"}, agents);
  }
};

// The review's case: node-z publishes only on model b's subject and never
// heartbeats, at the node cap. node-c's first model-a message counts the
// nodes of model a on both routers (node-a, itself), not node-z, which one
// of them never sees.
TEST(ModelScopeTest, ANodeSeenOnlyOnAnotherModelDoesNotCountAgainstMaxNodes) {
  AgentTableOptions agents;
  agents.max_nodes = 2;
  const std::vector<Sent> log = {
      {"node-a", "_agent", {Heartbeat("node-a", {{"wa", 0}})}},
      {"node-a", "a", {Stored("node-a", "wa", "a", {1})}},
      {"node-z", "b", {Stored("node-z", "wz", "b", {9})}},
      {"node-c", "a", {Stored("node-c", "wc", "a", {2})}},
  };
  Pair pair(log, agents);
  EXPECT_EQ(testing::Holders(pair.filtered.index, "a", 2), std::vector<std::string>{"wc"});
  EXPECT_EQ(testing::Holders(pair.full.index, "a", 2), std::vector<std::string>{"wc"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);

  // Heartbeats are read by every router: a third node that heartbeated
  // counts for model a on both, so node-c is refused on both.
  std::vector<Sent> announced = log;
  announced.insert(announced.begin() + 2, {"node-y", "_agent", {Heartbeat("node-y", {{"wy", 0}})}});
  Pair capped(announced, agents);
  EXPECT_TRUE(testing::Holders(capped.filtered.index, "a", 2).empty());
  EXPECT_TRUE(testing::Holders(capped.full.index, "a", 2).empty());
  EXPECT_EQ(capped.filtered.index.Stats().digest, capped.full.index.Stats().digest);
}

// node-z claims worker "w9" by an event on model b's subject; node-c then
// stores "w9" in model a. A claim on model b is model b's: both routers let
// node-c own "w9" in model a.
TEST(ModelScopeTest, AClaimOnAnotherModelsSubjectDoesNotOwnTheSourceHere) {
  const std::vector<Sent> log = {
      {"node-z", "b", {Stored("node-z", "w9", "b", {9})}},
      {"node-c", "a", {Stored("node-c", "w9", "a", {2})}},
      {"node-z", "a", {Stored("node-z", "w9", "a", {3})}},  // node-c's in model a now
  };
  Pair pair(log, {});
  EXPECT_EQ(testing::Holders(pair.full.index, "a", 2), std::vector<std::string>{"w9"});
  EXPECT_TRUE(testing::Holders(pair.full.index, "a", 3).empty());
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
  EXPECT_EQ(pair.full.loop->agents().Owner({"w9", 0}, "a"), "node-c");
  EXPECT_EQ(pair.full.loop->agents().Owner({"w9", 0}, "b"), "node-z");
  EXPECT_EQ(pair.filtered.loop->agents().Owner({"w9", 0}, "a"), "node-c");
}

// A heartbeat (read by every router) announces a source in every model: a
// claim of it by another node's events on a model's subject ends, its
// entries cleared, on every router alike.
TEST(ModelScopeTest, AnAnnouncementEndsAnotherNodesClaimInEveryModel) {
  const std::vector<Sent> log = {
      {"node-z", "a", {Stored("node-z", "w9", "a", {1})}},
      {"node-z", "b", {Stored("node-z", "w9", "b", {9})}},
      {"node-c", "_agent", {Heartbeat("node-c", {{"w9", 0}})}},
      {"node-z", "a", {Stored("node-z", "w9", "a", {2})}},  // refused: node-c's
      {"node-c", "a", {Stored("node-c", "w9", "a", {3})}},
  };
  Pair pair(log, {});
  EXPECT_TRUE(testing::Holders(pair.full.index, "a", 1).empty());
  EXPECT_TRUE(testing::Holders(pair.full.index, "a", 2).empty());
  EXPECT_EQ(testing::Holders(pair.full.index, "a", 3), std::vector<std::string>{"w9"});
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
  EXPECT_EQ(pair.full.loop->agents().Owner({"w9", 0}), "node-c");
}

// max_sources_per_node counts a node's sources in the message's model (and
// its announced ones), not those it claimed on other models' subjects.
TEST(ModelScopeTest, ANodesSourceCountIsPerModel) {
  AgentTableOptions agents;
  agents.max_sources_per_node = 2;
  const std::vector<Sent> log = {
      {"node-z", "b", {Stored("node-z", "w1", "b", {9}), Stored("node-z", "w2", "b", {9})}},
      {"node-z", "a", {Stored("node-z", "w3", "a", {1})}},
      {"node-z", "a", {Stored("node-z", "w4", "a", {2})}},
      {"node-z", "a", {Stored("node-z", "w5", "a", {3})}},  // a third in model a: refused
  };
  Pair pair(log, agents);
  EXPECT_EQ(testing::Holders(pair.full.index, "a", 2), std::vector<std::string>{"w4"});
  EXPECT_TRUE(testing::Holders(pair.full.index, "a", 3).empty());
  EXPECT_EQ(pair.filtered.index.Stats().digest, pair.full.index.Stats().digest);
}

// Expiry (on "_expire", read by every router) clears a node's claims in each
// model and its announced sources in every model; restored from the table, a
// replica keeps the claims per model.
TEST(ModelScopeTest, ExpiryAndRestoreKeepClaimsPerModel) {
  const std::vector<Sent> log = {
      {"node-z", "a", {Stored("node-z", "w1", "a", {1})}},
      {"node-z", "b", {Stored("node-z", "w2", "b", {9})}},
  };
  Pair pair(log, {});
  std::vector<AgentTable::AgentView> agents = pair.full.loop->agents().Agents();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_TRUE(agents[0].sources.empty());
  ASSERT_EQ(agents[0].model_sources.size(), 2u);
  AgentTable restored;
  restored.Restore(agents, std::chrono::steady_clock::now());
  EXPECT_EQ(restored.Owner({"w1", 0}, "a"), "node-z");
  EXPECT_EQ(restored.Owner({"w1", 0}, "b"), std::nullopt);
  EXPECT_EQ(restored.Owner({"w2", 0}, "b"), "node-z");

  PlacementEvent expire;
  expire.kind = PlacementKind::kAgentExpired;
  expire.agent = "node-z";
  std::vector<PlacementEvent> clears;
  restored.Observe(expire, 3, std::chrono::steady_clock::now(), &clears);
  ASSERT_EQ(clears.size(), 2u);
  EXPECT_EQ(clears[0].model, "a");
  EXPECT_EQ(clears[0].source, (SourceKey{"w1", 0}));
  EXPECT_EQ(clears[1].model, "b");
  EXPECT_EQ(restored.Owner({"w1", 0}), std::nullopt);
}

}  // namespace
}  // namespace kvindex::consume
