// LivenessMonitor: leases bounded by router configuration, expiries that a
// message published in advance under their id cannot pre-empt (issue #21
// section 1), proposed from the table's leases.
#include "shared/consume/liveness_monitor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include "shared/consume/testing/scripted_reader.h"
#include "shared/index/kv_index.h"

namespace kvindex::consume {
namespace {

using testing::ScriptedReader;

constexpr uint64_t kNow = 1'700'000'000'000'000'000ull;

PlacementEvent Heartbeat(uint32_t lease_ms) {
  PlacementEvent e;
  e.kind = PlacementKind::kHeartbeat;
  e.agent = "node-a";
  e.lease_ms = lease_ms;
  e.sources = {{"w0", 0}};
  return e;
}

PlacementEvent Stored() {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {"w0", 0};
  e.agent = "node-a";
  e.block_size = 4;
  e.block_hashes = {1, 2};
  return e;
}

// JetStream as the monitor sees it: a message id already in the duplicate
// window is dropped; any other append lands at the next position.
struct Log {
  ScriptedReader reader;
  uint64_t next_position = 1;
  std::set<std::string> ids;
  std::vector<std::string> proposed;

  LivenessMonitor::Append Appender() {
    return [this](const std::string& agent, const std::string& id,
                  const std::vector<PlacementEvent>& events) -> Status {
      proposed.push_back(id);
      if (!ids.insert(id).second) return absl::OkStatus();  // "duplicate": acknowledged, dropped
      reader.Add(next_position++, {}, events, false, "kvindex.events._expire." + agent, kNow);
      return absl::OkStatus();
    };
  }
};

bool WaitApplied(const ApplyLoop& loop, uint64_t position) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (loop.position() < position || !loop.CaughtUp()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// #21: a heartbeat with lease_ms = 2^32-1 kept a dead node alive for 49
// days. The router's --max-lease bounds it.
TEST(LivenessMonitorTest, TheRoutersMaxLeaseBoundsWhatAnAgentAnnounces) {
  Log log;
  log.reader.Add(log.next_position++, {.agent = "node-a", .incarnation = 5, .msg_seq = 1},
                 {Heartbeat(std::numeric_limits<uint32_t>::max()), Stored()}, false,
                 "kvindex.events._agent.node-a", kNow);
  index::KvIndex index;
  ApplyLoop loop(&log.reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitApplied(loop, 1));
  LivenessMonitor monitor(
      &loop, nullptr, log.Appender(),
      {.interval = std::chrono::hours(1), .max_lease = std::chrono::seconds(2)});
  const auto seen = loop.agents().Leases().at(0).heartbeat_seen;
  monitor.CheckOnce(seen + std::chrono::seconds(1));
  EXPECT_TRUE(log.proposed.empty());
  monitor.CheckOnce(seen + std::chrono::seconds(3));
  ASSERT_EQ(log.proposed.size(), 1u);
  EXPECT_EQ(log.proposed[0], "kvindex-expire:node-a:1");
  ASSERT_TRUE(WaitApplied(loop, 2));
  EXPECT_EQ(index.Stats().entries[0], 0u);
  EXPECT_TRUE(loop.agents().Agents().at(0).expired);
  loop.Stop();
}

// #21: an empty message published in advance with the id
// kvindex-expire:<node>:<last heartbeat position> made JetStream drop the
// routers' real expiry: the dead node never expired. A lease later the
// expiry is proposed again under a fresh id, and takes effect.
TEST(LivenessMonitorTest, APreemptedExpiryIsProposedAgainUnderAFreshId) {
  Log log;
  log.reader.Add(log.next_position++, {.agent = "node-a", .incarnation = 5, .msg_seq = 1},
                 {Heartbeat(1000), Stored()}, false, "kvindex.events._agent.node-a", kNow);
  // The attacker's message, in the log before the expiry.
  log.ids.insert("kvindex-expire:node-a:1");
  log.reader.Add(log.next_position++, {}, {}, false, "kvindex.events._expire.node-a", kNow);
  index::KvIndex index;
  RouterProbe probe;
  ApplyLoop loop(&log.reader, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitApplied(loop, 2));
  LivenessMonitor monitor(&loop, &probe, log.Appender(), {.interval = std::chrono::hours(1)});
  const auto seen = loop.agents().Leases().at(0).heartbeat_seen;
  monitor.CheckOnce(seen + std::chrono::milliseconds(1500));
  ASSERT_EQ(log.proposed.size(), 1u);  // dropped as a duplicate
  monitor.CheckOnce(seen + std::chrono::milliseconds(2000));
  EXPECT_EQ(log.proposed.size(), 1u);  // within a lease of the proposal: waiting
  EXPECT_FALSE(loop.agents().Agents().at(0).expired);
  monitor.CheckOnce(seen + std::chrono::milliseconds(2600));
  ASSERT_EQ(log.proposed.size(), 2u);
  EXPECT_NE(log.proposed[1], log.proposed[0]);
  EXPECT_EQ(log.proposed[1].rfind("kvindex-expire:node-a:1:", 0), 0u) << log.proposed[1];
  ASSERT_TRUE(WaitApplied(loop, 3));
  EXPECT_TRUE(loop.agents().Agents().at(0).expired);
  EXPECT_EQ(index.Stats().entries[0], 0u);
  // Expired: nothing more to propose.
  monitor.CheckOnce(seen + std::chrono::seconds(10));
  EXPECT_EQ(log.proposed.size(), 2u);
  loop.Stop();
}

// Two routers re-propose under different ids: an id taken by another client
// for one router's retry does not stop the other's.
TEST(LivenessMonitorTest, ReproposalIdsDifferPerRouter) {
  Log log;
  log.reader.Add(log.next_position++, {.agent = "node-a", .incarnation = 5, .msg_seq = 1},
                 {Heartbeat(1000)}, false, "kvindex.events._agent.node-a", kNow);
  log.ids.insert("kvindex-expire:node-a:1");
  index::KvIndex index;
  ApplyLoop loop(&log.reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitApplied(loop, 1));
  std::vector<std::string> ids;
  for (int router = 0; router < 2; ++router) {
    Log other;
    LivenessMonitor monitor(&loop, nullptr, other.Appender(), {.interval = std::chrono::hours(1)});
    const auto seen = loop.agents().Leases().at(0).heartbeat_seen;
    monitor.CheckOnce(seen + std::chrono::milliseconds(1500));
    monitor.CheckOnce(seen + std::chrono::milliseconds(2600));
    ASSERT_EQ(other.proposed.size(), 2u);
    ids.push_back(other.proposed[1]);
  }
  EXPECT_NE(ids[0], ids[1]);
  loop.Stop();
}

// #21: a node that announced a source (or published anything) but never
// heartbeated had no lease, so it never expired and kept its --max-nodes
// slot for good. It is granted the router's --max-lease, then expired by the
// log like any silent node, and its slot goes to the next node.
TEST(LivenessMonitorTest, ANodeThatNeverHeartbeatsLosesItsSlotAfterTheMaxLease) {
  Log log;
  // node-a only stores; node-b, a second node past --max-nodes 1, is
  // refused whole.
  log.reader.Add(log.next_position++, {.agent = "node-a", .incarnation = 5, .msg_seq = 1},
                 {Stored()}, false, "kvindex.events.m.node-a", kNow);
  PlacementEvent b_stored = Stored();
  b_stored.agent = "node-b";
  b_stored.source = {"w1", 0};
  log.reader.Add(log.next_position++, {.agent = "node-b", .incarnation = 6, .msg_seq = 1},
                 {b_stored}, false, "kvindex.events.m.node-b", kNow);
  index::KvIndex index;
  ApplyOptions options;
  options.agents.max_nodes = 1;
  ApplyLoop loop(&log.reader, &index, nullptr, options);
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitApplied(loop, 2));
  EXPECT_EQ(index.Stats().entries[0], 2u);  // node-a's; node-b's refused (too_many_nodes)
  LivenessMonitor monitor(
      &loop, nullptr, log.Appender(),
      {.interval = std::chrono::hours(1), .max_lease = std::chrono::seconds(2)});
  const auto t0 = std::chrono::steady_clock::now();
  monitor.CheckOnce(t0);  // first seen: the lease starts
  monitor.CheckOnce(t0 + std::chrono::seconds(1));
  EXPECT_TRUE(log.proposed.empty());
  monitor.CheckOnce(t0 + std::chrono::milliseconds(2100));
  ASSERT_EQ(log.proposed.size(), 1u);
  EXPECT_EQ(log.proposed[0], "kvindex-expire:node-a:0:1");  // live from position 1
  ASSERT_TRUE(WaitApplied(loop, 3));
  EXPECT_TRUE(loop.agents().Agents().at(0).expired);
  EXPECT_EQ(index.Stats().entries[0], 0u);
  // The slot is free: node-b's next message applies.
  b_stored.block_hashes = {7};
  log.reader.Add(log.next_position++, {.agent = "node-b", .incarnation = 6, .msg_seq = 2},
                 {b_stored}, false, "kvindex.events.m.node-b", kNow);
  ASSERT_TRUE(WaitApplied(loop, 4));
  EXPECT_EQ(index.Stats().entries[0], 1u);
  // node-b never heartbeats either: a monitor first seeing it now waits a
  // full lease for it too (its first message after a refusal also asked it
  // for snapshots).
  auto expiries = [&] {
    std::vector<std::string> ids;
    for (const std::string& id : log.proposed) {
      if (id.rfind("kvindex-expire:", 0) == 0) ids.push_back(id);
    }
    return ids;
  };
  monitor.CheckOnce(t0 + std::chrono::seconds(3));
  EXPECT_EQ(expiries().size(), 1u);
  monitor.CheckOnce(t0 + std::chrono::milliseconds(5200));
  ASSERT_EQ(expiries().size(), 2u);
  EXPECT_EQ(expiries()[1], "kvindex-expire:node-b:0:4");  // live from position 4
  loop.Stop();
}

// Review finding 4: the expiry id of a node that never heartbeated named its
// numbering (incarnation, last msg_seq), which replicas do not share: a
// router reading only model m's subject saw msg_seq 1, one reading every
// subject msg_seq 2, so the two proposed two expiries. It names the log
// position where the node became live, the same on every replica and after
// a restore.
TEST(LivenessMonitorTest, ANeverHeartbeatingNodesExpiryIdIsTheSameOnEveryReplica) {
  PlacementEvent other = Stored();
  other.model = "other";
  other.source = {"w1", 0};
  auto feed = [&](Log* log, bool every_subject) {
    log->reader.Add(1, {.agent = "node-a", .incarnation = 5, .msg_seq = 1, .subject_seq = 1},
                    {Stored()}, false, "kvindex.events.m.node-a", kNow);
    if (every_subject) {
      log->reader.Add(2, {.agent = "node-a", .incarnation = 5, .msg_seq = 2, .subject_seq = 1},
                      {other}, false, "kvindex.events.other.node-a", kNow);
    }
    log->next_position = 3;
  };
  Log filtered, full;
  feed(&filtered, false);
  feed(&full, true);
  index::KvIndex filtered_index, full_index;
  ApplyLoop filtered_loop(&filtered.reader, &filtered_index, nullptr, {});
  ApplyLoop full_loop(&full.reader, &full_index, nullptr, {});
  ASSERT_TRUE(filtered_loop.Start().ok());
  ASSERT_TRUE(full_loop.Start().ok());
  ASSERT_TRUE(WaitApplied(filtered_loop, 1));
  ASSERT_TRUE(WaitApplied(full_loop, 2));
  // A third replica restored from the full one's table.
  Log restored;
  restored.next_position = 3;
  index::KvIndex restored_index;
  ApplyLoop restored_loop(&restored.reader, &restored_index, nullptr, {});
  restored_loop.agents().Restore(full_loop.agents().Agents(), std::chrono::steady_clock::now());
  ASSERT_TRUE(restored_loop.Start().ok());
  ASSERT_TRUE(WaitApplied(restored_loop, 0));
  const LivenessOptions options{.interval = std::chrono::hours(1),
                                .max_lease = std::chrono::seconds(2)};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto [log, loop] : {std::pair{&filtered, &filtered_loop}, std::pair{&full, &full_loop},
                           std::pair{&restored, &restored_loop}}) {
    LivenessMonitor monitor(loop, nullptr, log->Appender(), options);
    monitor.CheckOnce(t0);
    monitor.CheckOnce(t0 + std::chrono::seconds(3));
    ASSERT_EQ(log->proposed.size(), 1u);
    EXPECT_EQ(log->proposed[0], "kvindex-expire:node-a:0:1");
  }
  filtered_loop.Stop();
  full_loop.Stop();
  restored_loop.Stop();
}

// Review finding 4: a node heartbeating with lease_ms = 0 was taken for one
// that never heartbeated (granted --max-lease, expiry id ":0:..."). It
// heartbeated: its lease is the one it announced, its expiry names its
// heartbeat like any other's.
TEST(LivenessMonitorTest, AHeartbeatWithLeaseZeroIsAHeartbeat) {
  Log log;
  log.reader.Add(log.next_position++, {.agent = "node-a", .incarnation = 5, .msg_seq = 1},
                 {Heartbeat(0)}, false, "kvindex.events._agent.node-a", kNow);
  index::KvIndex index;
  ApplyLoop loop(&log.reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitApplied(loop, 1));
  LivenessMonitor monitor(
      &loop, nullptr, log.Appender(),
      {.interval = std::chrono::hours(1), .max_lease = std::chrono::seconds(60)});
  monitor.CheckOnce(std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
  ASSERT_EQ(log.proposed.size(), 1u);
  EXPECT_EQ(log.proposed[0], "kvindex-expire:node-a:1");
  ASSERT_TRUE(WaitApplied(loop, 2));
  EXPECT_TRUE(loop.agents().Agents().at(0).expired);
  loop.Stop();
}

}  // namespace
}  // namespace kvindex::consume
