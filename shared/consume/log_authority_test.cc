// The log's authority rules (docs/security.md, "The log"), each built from a
// reproduction of issue #21 section 1 or #26, through the ApplyLoop as a
// router runs it: a node speaks only for itself, owns the sources it
// announced first until it expires, cannot be numbered into silence; a new
// incarnation decides what the previous one's sources become; activity and
// the table stay what reached the index, bounded.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>

#include "shared/consume/apply_loop.h"
#include "shared/consume/testing/replica_checks.h"
#include "shared/consume/testing/scripted_reader.h"
#include "shared/index/kv_index.h"
#include "shared/index/testing/events.h"

namespace kvindex::consume {
namespace {

using testing::ScriptedReader;

constexpr uint64_t kNow = 1'700'000'000'000'000'000ull;  // the log's clock (stored_ns)

std::string EventsSubject(const std::string& node) { return "kvindex.events.m." + node; }
std::string AgentSubject(const std::string& node) { return "kvindex.events._agent." + node; }
std::string ExpireSubject(const std::string& node) { return "kvindex.events._expire." + node; }

codec::MessageHeader Header(const std::string& node, uint64_t msg_seq,
                            uint64_t incarnation = kNow - 1000) {
  return {.agent = node, .incarnation = incarnation, .msg_seq = msg_seq};
}

// As `node`'s agent publishes them, at the log's clock.
PlacementEvent Cleared(const std::string& node, const SourceKey& source) {
  return index::testing::Stamped(node, kNow,
                                 index::testing::Cleared(source.worker, source.dp_rank));
}

PlacementEvent Stored(const std::string& node, const SourceKey& source,
                      std::vector<uint64_t> hashes) {
  return index::testing::Stamped(
      node, kNow,
      index::testing::Stored(source.worker, Tier::kDevice, std::move(hashes), source.dp_rank));
}

PlacementEvent Heartbeat(const std::string& node, std::vector<SourceKey> sources,
                         uint32_t lease_ms = 1000) {
  PlacementEvent e;
  e.kind = PlacementKind::kHeartbeat;
  e.agent = node;
  e.lease_ms = lease_ms;
  e.sources = std::move(sources);
  return e;
}

SourceEndpoint Ep(const std::string& worker, const std::string& address) {
  SourceEndpoint endpoint;
  endpoint.source.worker = worker;
  endpoint.model = "m";
  endpoint.address = address;
  return endpoint;
}

PlacementEvent Expire(const std::string& node, uint64_t heartbeat_seq) {
  PlacementEvent e;
  e.kind = PlacementKind::kAgentExpired;
  e.agent = node;
  e.heartbeat_seq = heartbeat_seq;
  return e;
}

// One router replica over a scripted log.
struct Replica {
  ScriptedReader reader;
  index::KvIndex index;
  RouterProbe probe;
  std::unique_ptr<ApplyLoop> loop;

  // Node-a (worker w0, rank 0) announces itself and stores blocks 1, 2:
  // positions 1 and 2.
  void NodeAStarts() {
    reader.Add(1, Header("node-a", 1), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);
    reader.Add(2, Header("node-a", 2), {Stored("node-a", {"w0", 0}, {1, 2})}, false,
               EventsSubject("node-a"), kNow);
  }
  // Applies what the log holds (again from where it stopped, same table).
  void Run(ApplyOptions options = {}) {
    if (loop == nullptr) {
      loop = std::make_unique<ApplyLoop>(&reader, &index, &probe, std::move(options));
    }
    ASSERT_TRUE(loop->Start().ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!loop->CaughtUp()) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    loop->Stop();
  }
  // Workers holding block `hash` of model "m" (rank 0), in order.
  std::vector<std::string> Holders(uint64_t hash) { return testing::Holders(index, "m", hash); }
  double Refused(const std::string& reason) const {
    return testing::RefusedMessages(probe, reason);
  }
  AgentTable::AgentView Agent(const std::string& node) const {
    for (const auto& agent : loop->agents().Agents()) {
      if (agent.agent == node) return agent;
    }
    return {};
  }
};

// Endpoints on the log (#22 item 4): a heartbeat announces endpoints of the
// sources it lists; one naming another source is refused whole (a node
// cannot point a gateway at someone else's worker); the agent's expiry
// takes the endpoint away.
TEST(LogAuthorityTest, HeartbeatEndpointsNameOnlyTheNodesOwnSources) {
  Replica r;
  r.NodeAStarts();
  PlacementEvent announce = Heartbeat("node-a", {{"w0", 0}});
  announce.endpoints.push_back(Ep("w0", "10.0.0.7:8000"));
  r.reader.Add(3, Header("node-a", 3), {announce}, false, AgentSubject("node-a"), kNow);
  PlacementEvent forged = Heartbeat("node-b", {{"w1", 0}});
  forged.endpoints.push_back(Ep("w1", "10.0.0.9:8000"));
  forged.endpoints.push_back(Ep("w0", "10.0.0.9:8000"));
  r.reader.Add(4, Header("node-b", 1), {forged}, false, AgentSubject("node-b"), kNow);
  r.Run();
  EXPECT_EQ(r.Refused("foreign_source"), 1);
  auto endpoint_of = [&r](const SourceKey& source) {
    for (const auto& row : r.loop->Activity()) {
      if (row.source == source) return row.endpoint + "/" + row.endpoint_model;
    }
    return std::string("none");
  };
  EXPECT_EQ(endpoint_of({"w0", 0}), "10.0.0.7:8000/m");
  EXPECT_EQ(endpoint_of({"w1", 0}), "none");  // node-b's whole heartbeat was refused

  // A heartbeat without endpoints withdraws them; the next announces again.
  r.reader.Add(5, Header("node-a", 4), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(endpoint_of({"w0", 0}), "/");
  r.reader.Add(6, Header("node-a", 5), {announce}, false, AgentSubject("node-a"), kNow);
  r.reader.Add(7, {}, {Expire("node-a", 6)}, false, ExpireSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(endpoint_of({"w0", 0}), "none");
  EXPECT_EQ(r.loop->agents().Owner({"w0", 0}), std::nullopt);
}

// #21: from node-b's subject, a header saying agent=node-a with incarnation
// 2^64-1 made every later message of node-a stale. Refused now; node-a's
// next message applies.
TEST(LogAuthorityTest, AHeaderForAnotherNodeThanTheSubjectIsRefused) {
  Replica r;
  r.NodeAStarts();
  r.reader.Add(3, Header("node-a", 1, std::numeric_limits<uint64_t>::max()),
               {Heartbeat("node-a", {{"w0", 0}})}, false, AgentSubject("node-b"), kNow);
  r.reader.Add(4, Header("node-a", 3), {Stored("node-a", {"w0", 0}, {3})}, false,
               EventsSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(r.Refused("subject_mismatch"), 1);
  EXPECT_EQ(r.Agent("node-a").incarnation, kNow - 1000);
  EXPECT_EQ(r.Holders(3), std::vector<std::string>{"w0"});
  EXPECT_EQ(r.index.Stats().entries[0], 3u);
  EXPECT_EQ(r.index.Stats().applied_seq, 4u);  // a refused message still moves the position
}

// #21: from node-b's own subject and header, cleared(w0) for node-a's
// worker wiped it, and stores for it showed in /v1/match; a heartbeat naming
// node-a's source would keep it alive. Each refused whole.
TEST(LogAuthorityTest, ANodeCannotTouchAnotherNodesSources) {
  Replica r;
  r.NodeAStarts();
  // node-b announces its own worker first: that message applies.
  r.reader.Add(3, Header("node-b", 1), {Heartbeat("node-b", {{"w1", 0}})}, false,
               AgentSubject("node-b"), kNow);
  r.reader.Add(4, Header("node-b", 2), {Cleared("node-b", {"w0", 0})}, false,
               EventsSubject("node-b"), kNow);
  r.reader.Add(5, Header("node-b", 3),
               {Stored("node-b", {"w1", 0}, {7}), Stored("node-b", {"w0", 0}, {8})}, false,
               EventsSubject("node-b"), kNow);
  r.reader.Add(6, Header("node-b", 4), {Heartbeat("node-b", {{"w1", 0}, {"w0", 0}}, 1)}, false,
               AgentSubject("node-b"), kNow);
  // Events naming node-a inside node-b's own message.
  r.reader.Add(7, Header("node-b", 5), {Cleared("node-a", {"w0", 0})}, false,
               EventsSubject("node-b"), kNow);
  // Kinds only routers write, from an agent's subject.
  PlacementEvent worker_expired = Cleared("node-b", {"w0", 0});
  worker_expired.kind = PlacementKind::kWorkerExpired;
  r.reader.Add(8, Header("node-b", 6), {worker_expired, Expire("node-a", 99)}, false,
               AgentSubject("node-b"), kNow);
  r.Run();
  EXPECT_EQ(r.Holders(1), std::vector<std::string>{"w0"});
  EXPECT_EQ(r.Holders(2), std::vector<std::string>{"w0"});
  EXPECT_TRUE(r.Holders(7).empty());  // dropped whole, with the forged store
  EXPECT_TRUE(r.Holders(8).empty());
  EXPECT_EQ(r.Refused("foreign_source"), 3);
  EXPECT_EQ(r.Refused("foreign_event"), 1);
  EXPECT_EQ(r.Refused("kind_not_allowed"), 1);
  EXPECT_EQ(r.loop->agents().Owner({"w0", 0}), "node-a");
  EXPECT_EQ(r.loop->agents().Owner({"w1", 0}), "node-b");
  EXPECT_EQ(r.Agent("node-a").lease_ms, 1000u);
}

// A source is free again once its owner expired; the ownership is in the
// replicated table, so a replica restored from it (a checkpoint holds
// AgentTable::Agents()) decides the same.
TEST(LogAuthorityTest, OwnershipEndsWithExpiryAndSurvivesARestore) {
  Replica r;
  r.NodeAStarts();
  r.Run();
  AgentTable restored;
  restored.Restore(r.loop->agents().Agents(), std::chrono::steady_clock::now());
  EXPECT_EQ(restored.Owner({"w0", 0}), "node-a");

  for (AgentTable* table : {&r.loop->agents(), &restored}) {
    std::vector<PlacementEvent> clears;
    SCOPED_TRACE(table == &restored ? "restored" : "replica");
    LogRefusal why{};
    LogBatch::Message take;
    take.position = 3;
    take.header = Header("node-b", 1);
    take.subject = AgentSubject("node-b");
    const std::vector<PlacementEvent> claim = {Heartbeat("node-b", {{"w0", 0}})};
    EXPECT_EQ(table->Admit(take, claim, &clears, &why), AgentTable::Verdict::kRefused);
    EXPECT_EQ(why, LogRefusal::kForeignSource);

    LogBatch::Message expiry;
    expiry.position = 4;
    expiry.subject = ExpireSubject("node-a");
    const std::vector<PlacementEvent> expire = {Expire("node-a", 1)};
    ASSERT_EQ(table->Admit(expiry, expire, &clears, &why), AgentTable::Verdict::kApply);
    clears.clear();
    table->Observe(expire[0], 4, std::chrono::steady_clock::now(), &clears);
    ASSERT_EQ(clears.size(), 1u);  // w0 cleared
    EXPECT_EQ(table->Owner({"w0", 0}), std::nullopt);

    take.position = 5;
    EXPECT_EQ(table->Admit(take, claim, &clears, &why), AgentTable::Verdict::kApply);
  }
}

// #21: enough made-up sources filled a model's source ids. A node owns at
// most max_sources_per_node.
TEST(LogAuthorityTest, ANodeOwnsABoundedNumberOfSources) {
  Replica r;
  r.reader.Add(1, Header("node-a", 1), {Heartbeat("node-a", {{"w0", 0}, {"w1", 0}, {"w2", 0}})},
               false, AgentSubject("node-a"), kNow);
  r.reader.Add(2, Header("node-a", 2), {Heartbeat("node-a", {{"w0", 0}, {"w1", 0}})}, false,
               AgentSubject("node-a"), kNow);
  r.reader.Add(3, Header("node-a", 3),
               {Stored("node-a", {"w1", 0}, {1}), Stored("node-a", {"w1", 0}, {2})}, false,
               EventsSubject("node-a"), kNow);
  r.reader.Add(4, Header("node-a", 4), {Stored("node-a", {"w2", 0}, {3})}, false,
               EventsSubject("node-a"), kNow);
  ApplyOptions options;
  options.agents.max_sources_per_node = 2;
  r.Run(options);
  EXPECT_EQ(r.Refused("too_many_sources"), 2);
  EXPECT_EQ(r.Agent("node-a").sources.size(), 2u);
  EXPECT_EQ(r.Holders(1), std::vector<std::string>{"w1"});
  EXPECT_TRUE(r.Holders(3).empty());
}

// Review s11 item 2: per-subject numbering state comes from the wire (any
// model token a node may publish on). A header-only message on a token the
// node never sent events on leaves no state; past max_subjects_per_node
// subjects a message on a new one is refused whole (too_many_subjects).
TEST(LogAuthorityTest, ANodesSubjectStateIsBounded) {
  Replica r;
  uint64_t position = 0;
  uint64_t msg_seq = 0;
  auto send = [&](const std::string& token, std::vector<PlacementEvent> events) {
    ++position;
    ++msg_seq;
    r.reader.Add(
        position,
        {.agent = "node-a", .incarnation = kNow - 1000, .msg_seq = msg_seq, .subject_seq = 1},
        std::move(events), false, "kvindex.events." + token + ".node-a", kNow);
  };
  send("_agent", {Heartbeat("node-a", {{"w0", 0}})});
  for (int i = 0; i < 100; ++i) send("ghost" + std::to_string(i), {});  // header only
  for (int i = 0; i < 4; ++i) {
    const std::string model = "m" + std::to_string(i);
    send(model, {index::testing::Stamped(
                    "node-a", kNow,
                    index::testing::Stored("w0", Tier::kDevice, {uint64_t(i) + 1}, 0, model))});
  }
  ApplyOptions options;
  options.agents.max_subjects_per_node = 3;  // "_agent", m0, m1
  r.Run(options);
  EXPECT_EQ(r.Agent("node-a").subjects.size(), 3u);
  EXPECT_EQ(r.Refused("too_many_subjects"), 2);
  EXPECT_EQ(testing::Holders(r.index, "m1", 2), std::vector<std::string>{"w0"});
  EXPECT_TRUE(testing::Holders(r.index, "m2", 3).empty());
}

// #21: an incarnation far ahead of the log's own clock would number the
// node's real messages stale until that time: refused.
TEST(LogAuthorityTest, AnIncarnationFarAheadOfTheLogIsRefused) {
  Replica r;
  r.NodeAStarts();
  const uint64_t hour = 3600ull * 1'000'000'000ull;
  r.reader.Add(3, Header("node-a", 1, kNow + hour), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);
  r.reader.Add(4, Header("node-a", 3), {Stored("node-a", {"w0", 0}, {3})}, false,
               EventsSubject("node-a"), kNow);
  // A restart a minute ahead of the log (clock skew) is a restart.
  r.reader.Add(5, Header("node-a", 1, kNow + hour / 60), {Cleared("node-a", {"w0", 0})}, false,
               EventsSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(r.Refused("incarnation_ahead"), 1);
  EXPECT_EQ(r.Agent("node-a").incarnation, kNow + hour / 60);
  EXPECT_EQ(r.Agent("node-a").gaps, 0u);
}

// Routers' subject: unsequenced agent_expired about its own node only.
TEST(LogAuthorityTest, TheExpirySubjectCarriesOnlyExpiriesOfItsNode) {
  Replica r;
  r.NodeAStarts();
  r.reader.Add(3, {}, {Expire("node-a", 1)}, false, ExpireSubject("node-b"), kNow);
  r.reader.Add(4, Header("node-a", 3), {Stored("node-a", {"w0", 0}, {3})}, false,
               ExpireSubject("node-a"), kNow);
  r.reader.Add(5, {}, {Stored("node-a", {"w0", 0}, {4})}, false, ExpireSubject("node-a"), kNow);
  r.reader.Add(6, {}, {}, false, "kvindex.events._other.node-a", kNow);
  r.reader.Add(7, {.agent = "node-a"}, {}, /*invalid=*/true, ExpireSubject("node-a"), kNow);
  r.reader.Add(8, {}, {}, false, ExpireSubject("node-a"), kNow);  // a resync request
  r.Run();
  EXPECT_EQ(r.Refused("foreign_event"), 1);
  EXPECT_EQ(r.Refused("subject_mismatch"), 1);
  EXPECT_EQ(r.Refused("kind_not_allowed"), 1);
  EXPECT_EQ(r.Refused("bad_subject"), 1);
  EXPECT_FALSE(r.Agent("node-a").expired);
  EXPECT_EQ(r.Agent("node-a").gaps, 0u);  // an undecodable router message clears nobody
  EXPECT_EQ(r.index.Stats().entries[0], 2u);
}

// #26.1: an agent restarted without its rank-1 source (or with a rank it
// learned from envelopes) left that source in every router for good. The
// new incarnation's first heartbeat decides: what it does not list is
// cleared and released; what it lists (a resumed source) stays.
TEST(LogAuthorityTest, ANewIncarnationsFirstHeartbeatClearsWhatItDoesNotFollow) {
  Replica r;
  r.NodeAStarts();  // (w0, 0) holds 1, 2
  r.reader.Add(3, Header("node-a", 3), {Stored("node-a", {"w0", 1}, {5})}, false,
               EventsSubject("node-a"), kNow);  // rank 1 learned from an envelope
  r.reader.Add(4, Header("node-a", 4), {Stored("node-a", {"w2", 0}, {6})}, false,
               EventsSubject("node-a"), kNow);
  r.reader.Add(5, Header("node-a", 5), {Heartbeat("node-a", {{"w0", 0}, {"w2", 0}})}, false,
               AgentSubject("node-a"), kNow);
  // Restart: w2 is no longer configured; w0 resumed (no start-up clear).
  r.reader.Add(6, Header("node-a", 1, kNow), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);
  r.reader.Add(7, Header("node-a", 2, kNow), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(r.Holders(1), std::vector<std::string>{"w0"});
  EXPECT_TRUE(r.Holders(6).empty());
  auto rank1 = r.index.MatchSequenceHashes("m", std::vector<uint64_t>{5});
  ASSERT_TRUE(rank1.ok());
  EXPECT_TRUE(rank1->workers.empty());
  EXPECT_EQ(r.loop->agents().Owner({"w2", 0}), std::nullopt);
  EXPECT_EQ(r.loop->agents().Owner({"w0", 1}), std::nullopt);
  EXPECT_EQ(r.loop->agents().Owner({"w0", 0}), "node-a");
  EXPECT_EQ(r.Agent("node-a").sources.size(), 1u);
}

// #26.7: activity came from the raw batch (stale and filtered events
// counted, rejected expiries marked sources cleared, router clears unseen).
TEST(LogAuthorityTest, ActivityRecordsOnlyWhatReachedTheIndex) {
  Replica r;
  r.NodeAStarts();
  r.reader.Add(3, Header("node-a", 2), {Stored("node-a", {"w9", 0}, {9})}, false,
               EventsSubject("node-a"), kNow);                                       // stale
  r.reader.Add(4, {}, {Expire("node-a", 0)}, false, ExpireSubject("node-a"), kNow);  // too old
  PlacementEvent other = Stored("node-a", {"w0", 0}, {3});
  other.model = "filtered";
  r.reader.Add(5, Header("node-a", 3), {other}, false, EventsSubject("node-a"), kNow);
  r.reader.Add(6, Header("node-b", 1), {Stored("node-b", {"w0", 0}, {4})}, false,
               EventsSubject("node-b"), kNow);  // refused
  ApplyOptions options;
  options.models = {"m"};
  r.Run(options);
  auto activity = r.loop->Activity();
  ASSERT_EQ(activity.size(), 1u);
  EXPECT_EQ(activity[0].source.worker, "w0");
  EXPECT_EQ(activity[0].events, 1u);  // the store at position 2 only
  EXPECT_FALSE(activity[0].cleared);
  EXPECT_TRUE(activity[0].live);
  EXPECT_EQ(activity[0].agent, "node-a");

  // A gap: the router's own clear of w0 is activity too.
  r.reader.Add(7, Header("node-a", 9), {}, false, EventsSubject("node-a"), kNow);
  r.Run(options);
  activity = r.loop->Activity();
  ASSERT_EQ(activity.size(), 1u);
  EXPECT_TRUE(activity[0].cleared);
  // An expiry that takes effect: the source is gone from the table.
  r.reader.Add(8, {}, {Expire("node-a", 1)}, false, ExpireSubject("node-a"), kNow);
  r.Run(options);
  EXPECT_TRUE(r.loop->Activity().empty());
}

// #26.9: the table only grew. Expired agents keep their numbering but no
// sources, at most max_tombstones of them; the monitor's view is leases only.
TEST(LogAuthorityTest, ExpiredAgentsAreBoundedTombstones) {
  Replica r;
  uint64_t position = 0;
  for (int n = 0; n < 5; ++n) {
    const std::string node = "node-" + std::to_string(n);
    const SourceKey source{"w" + std::to_string(n), 0};
    r.reader.Add(++position, Header(node, 1), {Heartbeat(node, {source})}, false,
                 AgentSubject(node), kNow);
    r.reader.Add(++position, Header(node, 2), {Stored(node, source, {uint64_t(n) + 1})}, false,
                 EventsSubject(node), kNow);
  }
  for (int n = 0; n < 4; ++n) {
    const std::string node = "node-" + std::to_string(n);
    r.reader.Add(++position, {}, {Expire(node, uint64_t(2 * n + 1))}, false, ExpireSubject(node),
                 kNow);
  }
  // A late message of an expired, still remembered incarnation stays stale.
  r.reader.Add(++position, Header("node-3", 2), {Stored("node-3", {"w3", 0}, {44})}, false,
               EventsSubject("node-3"), kNow);
  ApplyOptions options;
  options.agents.max_tombstones = 2;
  r.Run(options);
  const auto agents = r.loop->agents().Agents();
  ASSERT_EQ(agents.size(), 3u);  // node-2 and node-3 (tombstones), node-4
  EXPECT_EQ(agents[0].agent, "node-2");
  EXPECT_TRUE(agents[0].expired);
  EXPECT_TRUE(agents[0].sources.empty());
  EXPECT_EQ(agents[1].stale, 1u);
  const auto leases = r.loop->agents().Leases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0].agent, "node-4");
  EXPECT_EQ(r.index.Stats().entries[0], 1u);
}

// #25 with #21: a restart may lower the incarnation (a clock behind), so
// one message numbered 1 with a low incarnation makes that its node's
// current one. It cannot silence the node: the real process's next message
// has a higher incarnation, which the table takes up again (failing closed:
// its sources are cleared and resynced, never left stale).
TEST(LogAuthorityTest, AForgedLowIncarnationCannotSilenceTheNode) {
  Replica r;
  r.NodeAStarts();  // incarnation kNow - 1000, msg_seq 1-2; (w0, 0) holds 1, 2
  r.reader.Add(3, Header("node-a", 1, 5), {Heartbeat("node-a", {{"w0", 0}})}, false,
               AgentSubject("node-a"), kNow);  // forged (or a stray restart)
  r.reader.Add(4, Header("node-a", 3), {Stored("node-a", {"w0", 0}, {3})}, false,
               EventsSubject("node-a"), kNow);  // the real process goes on
  r.reader.Add(5, Header("node-a", 4), {Stored("node-a", {"w0", 0}, {4})}, false,
               EventsSubject("node-a"), kNow);
  r.Run();
  EXPECT_EQ(r.Agent("node-a").incarnation, kNow - 1000);
  EXPECT_EQ(r.Agent("node-a").last_msg_seq, 4u);
  EXPECT_EQ(r.Agent("node-a").stale, 0u);
  EXPECT_EQ(r.Agent("node-a").gaps, 1u);  // 1, 2 cleared: fail closed
  EXPECT_TRUE(r.Holders(1).empty());
  EXPECT_EQ(r.Holders(4), std::vector<std::string>{"w0"});
}

}  // namespace
}  // namespace kvindex::consume
