#include "shared/consume/apply_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "shared/consume/in_process_log_reader.h"
#include "shared/consume/testing/scripted_reader.h"
#include "shared/index/kv_index.h"

namespace kvindex::consume {
namespace {

using testing::ScriptedReader;

PlacementEvent Stored(std::string worker, std::vector<uint64_t> hashes, Tier tier = Tier::kDevice) {
  PlacementEvent e;
  e.kind = PlacementKind::kStored;
  e.model = "m";
  e.source = {std::move(worker), 0};
  e.agent = "node-a";
  e.timestamp_ns = 1'700'000'000'000'000'000ull;
  e.tier = tier;
  e.block_size = 4;
  e.block_hashes = std::move(hashes);
  return e;
}

// Caught up with the start target and with everything published since.
bool WaitCaughtUp(const ApplyLoop& loop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!loop.CaughtUp() || loop.Pending() != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(ApplyLoopTest, AssignsPositionsAndTracksActivity) {
  InProcessSink sink;
  InProcessLogReader reader(&sink);
  index::KvIndex index;
  RouterProbe probe;
  ApplyLoop loop(&reader, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  std::vector<PlacementEvent> events = {Stored("w0", {1, 2}), Stored("w1", {1}, Tier::kHost)};
  ASSERT_TRUE(sink.Publish(events).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 2u);
  EXPECT_EQ(index.Stats().entries[0], 2u);
  EXPECT_EQ(index.Stats().entries[1], 1u);
  auto activity = loop.Activity();
  ASSERT_EQ(activity.size(), 2u);
  EXPECT_EQ(activity[0].source.worker, "w0");
  EXPECT_EQ(activity[0].agent, "node-a");
  EXPECT_EQ(activity[0].model, "m");
  EXPECT_EQ(activity[0].last_event_ns, 1'700'000'000'000'000'000ull);

  // Stop and start again: positions continue after applied_seq.
  loop.Stop();
  loop.Stop();
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{Stored("w2", {1})}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 3u);
  EXPECT_EQ(index.Stats().sources, 3u);
  loop.Stop();
}

// The value of `name`{outcome=`outcome`} in the probe's families (-1: absent).
double Sample(const RouterProbe& probe, const std::string& name, const std::string& outcome) {
  for (const auto& family : probe.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      if (outcome.empty()) return metric.counter.value;
      for (const auto& label : metric.label) {
        if (label.name == "outcome" && label.value == outcome) return metric.counter.value;
      }
    }
  }
  return -1;
}

TEST(ApplyLoopTest, IndexOutOfMemoryIsCountedAndThePositionMoves) {
  InProcessSink sink;
  InProcessLogReader reader(&sink);
  index::KvIndexOptions options;
  options.max_arena_chunks = 1;  // all of it reserved for removals: no store fits
  index::KvIndex index(options);
  RouterProbe probe;
  probe.Bind(&index, [] { return uint64_t{0}; });
  ApplyLoop loop(&reader, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{Stored("w0", {1, 2, 3})}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  loop.Stop();
  EXPECT_EQ(index.Stats().applied_seq, 1u);
  EXPECT_EQ(index.Stats().entries[0], 0u);
  EXPECT_EQ(Sample(probe, "kvindex_router_log_messages_total", "index_exhausted"), 1);
  EXPECT_EQ(Sample(probe, "kvindex_router_index_blocks_not_indexed_total", ""), 3);
  EXPECT_EQ(Sample(probe, "kvindex_router_index_sources_cleared_on_exhaustion_total", ""), 0);
}

TEST(ApplyLoopTest, AStartUpClearIsNoLastEvent) {
  InProcessSink sink;
  InProcessLogReader reader(&sink);
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  PlacementEvent clear = Stored("w0", {});
  clear.kind = PlacementKind::kCleared;
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{clear}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  auto activity = loop.Activity();
  ASSERT_EQ(activity.size(), 1u);
  EXPECT_EQ(activity[0].last_event_ns, 0u);  // the engine has said nothing yet
  PlacementEvent stored = Stored("w0", {1});
  stored.timestamp_ns += 5;
  clear.timestamp_ns += 9;
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{stored, clear}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  activity = loop.Activity();
  EXPECT_EQ(activity[0].last_event_ns, clear.timestamp_ns);  // an engine's clear counts
  loop.Stop();
}

TEST(ApplyLoopTest, ModelFilterKeepsPositionsMoving) {
  InProcessSink sink;
  InProcessLogReader reader(&sink);
  index::KvIndex index;
  ApplyOptions options;
  options.models = {"other"};
  ApplyLoop loop(&reader, &index, nullptr, options);
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(sink.Publish(std::vector<PlacementEvent>{Stored("w0", {1})}).ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 1u);
  EXPECT_EQ(index.Stats().entries[0], 0u);
}

codec::MessageHeader Seq(uint64_t msg_seq, uint64_t incarnation = 7) {
  return {.agent = "node-a", .incarnation = incarnation, .msg_seq = msg_seq};
}

PlacementEvent Heartbeat(std::vector<SourceKey> sources) {
  PlacementEvent e;
  e.kind = PlacementKind::kHeartbeat;
  e.agent = "node-a";
  e.lease_ms = 1000;
  e.sources = std::move(sources);
  return e;
}

PlacementEvent Expire(uint64_t heartbeat_seq) {
  PlacementEvent e;
  e.kind = PlacementKind::kAgentExpired;
  e.agent = "node-a";
  e.heartbeat_seq = heartbeat_seq;
  return e;
}

TEST(ApplyLoopTest, MessagesApplyAtTheirStreamPositions) {
  ScriptedReader reader;
  reader.Add(3, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(9, Seq(2), {Stored("w0", {3}, Tier::kHost)});
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 9u);
  EXPECT_EQ(index.Stats().entries[0], 2u);
  EXPECT_EQ(index.Stats().entries[1], 1u);
}

TEST(ApplyLoopTest, StaleMessagesAreSkippedAndGapsClearTheAgentsSources) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(2, Seq(2), {Stored("w1", {5})});
  reader.Add(3, Seq(1), {Stored("w0", {9})});  // a late retry: stale
  reader.Add(4, Seq(4), {Stored("w0", {3})});  // msg 3 lost: clear w0 and w1 first
  index::KvIndex index;
  RouterProbe probe;
  ApplyLoop loop(&reader, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 4u);
  EXPECT_EQ(index.Stats().entries[0], 1u);  // only block 3 of the message after the gap
  auto match = index.MatchSequenceHashes("m", std::vector<uint64_t>{3});
  ASSERT_TRUE(match.ok());
  ASSERT_EQ(match->workers.size(), 1u);
  EXPECT_EQ(match->workers[0].source.worker, "w0");
  auto agents = loop.agents().Agents();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0].stale, 1u);
  EXPECT_EQ(agents[0].gaps, 1u);
  auto resync = loop.agents().TakeResyncRequests();
  ASSERT_EQ(resync.size(), 1u);
  EXPECT_EQ(resync[0].agent, "node-a");
  EXPECT_EQ(resync[0].position, 4u);
}

TEST(ApplyLoopTest, ExpiryClearsUnlessANewerHeartbeatPrecedesIt) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(2, Seq(2), {Heartbeat({{"w0", 0}})});
  reader.Add(3, {}, {Expire(1)});  // decided on an older heartbeat: ignored
  reader.Add(4, {}, {Expire(2)});  // expires node-a
  reader.Add(5, {}, {Expire(2)});  // a second decision changes nothing
  index::KvIndex index;
  RouterProbe probe;
  ApplyLoop loop(&reader, &index, &probe, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 5u);
  EXPECT_EQ(index.Stats().entries[0], 0u);
  auto agents = loop.agents().Agents();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_TRUE(agents[0].expired);
  EXPECT_EQ(agents[0].expiries, 1u);
}

TEST(ApplyLoopTest, ExpiryAfterTheLastHeartbeatIsIgnoredOnceTheAgentSpeaksAgain) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(2, Seq(2), {Heartbeat({{"w0", 0}})});
  reader.Add(3, {}, {Expire(1)});
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().entries[0], 2u);
  EXPECT_FALSE(loop.agents().Agents()[0].expired);
}

TEST(ApplyLoopTest, UndecodableMessageOfAKnownAgentFailsClosed) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(2, {.agent = "node-a"}, {}, /*invalid=*/true);
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().applied_seq, 2u);
  EXPECT_EQ(index.Stats().entries[0], 0u);
}

// The undecodable message was the node's msg 2: msg 3 is no second gap (one
// clear, one resync), and a real gap after it still clears.
TEST(ApplyLoopTest, UndecodableMessageTakesOneClearNotTwo) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  reader.Add(2, {.agent = "node-a"}, {}, /*invalid=*/true);
  reader.Add(3, Seq(3), {Stored("w0", {3})});
  reader.Add(4, Seq(4), {Stored("w0", {4})});
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().entries[0], 2u);
  EXPECT_EQ(loop.agents().Agents()[0].gaps, 1u);
  EXPECT_EQ(loop.agents().TakeResyncRequests().size(), 1u);
}

// RunOnWriter from another thread while the owner starts and stops the
// loop (a checkpoint racing shutdown): every task runs exactly once, never
// beside the writer (TSan in CI: Start/Stop and RunOnWriter share no
// unguarded state).
TEST(ApplyLoopTest, RunOnWriterRacesStartAndStop) {
  ScriptedReader reader;
  reader.Add(1, Seq(1), {Heartbeat({{"w0", 0}}), Stored("w0", {1, 2})});
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  std::atomic<bool> done{false};
  std::atomic<int> ran{0};
  int asked = 0;
  std::thread checkpoints([&] {
    while (!done.load()) {
      loop.RunOnWriter([&] { ran.fetch_add(1); });
      ++asked;
    }
  });
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(loop.Start().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    loop.Stop();
  }
  done.store(true);
  checkpoints.join();
  EXPECT_EQ(ran.load(), asked);
  EXPECT_GT(asked, 0);
}

TEST(ApplyLoopTest, NewIncarnationStartsItsOwnNumbering) {
  ScriptedReader reader;
  reader.Add(1, Seq(1, 7), {Heartbeat({{"w0", 0}}), Stored("w0", {1})});
  reader.Add(2, Seq(2, 7), {Stored("w0", {2})});
  reader.Add(3, Seq(1, 8), {Stored("w0", {3})});  // restarted agent
  reader.Add(4, Seq(3, 7), {Stored("w0", {4})});  // the old process, late: stale
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().entries[0], 3u);
  EXPECT_EQ(loop.agents().Agents()[0].gaps, 0u);
  EXPECT_EQ(loop.agents().Agents()[0].stale, 1u);
}

// #25: an agent restarted on a clock behind its previous run (rescheduled
// to another host) has a lower incarnation. Its first message (msg_seq 1)
// is a new start all the same; before, every message of it was stale and
// the node stayed silent until a later restart.
TEST(ApplyLoopTest, ARestartOnAClockBehindIsANewStart) {
  ScriptedReader reader;
  reader.Add(1, Seq(1, 8), {Heartbeat({{"w0", 0}}), Stored("w0", {1})});
  reader.Add(2, Seq(2, 8), {Stored("w0", {2})});
  reader.Add(3, Seq(1, 7), {Stored("w0", {3})});  // restarted, its clock behind
  reader.Add(4, Seq(2, 7), {Stored("w0", {4})});
  reader.Add(5, Seq(2, 6), {Stored("w0", {5})});  // an older process, late: stale
  reader.Add(6, Seq(1, 7), {Stored("w0", {6})});  // a duplicate of this start: stale
  index::KvIndex index;
  ApplyLoop loop(&reader, &index, nullptr, {});
  ASSERT_TRUE(loop.Start().ok());
  ASSERT_TRUE(WaitCaughtUp(loop));
  EXPECT_EQ(index.Stats().entries[0], 4u);
  const auto agents = loop.agents().Agents();
  EXPECT_EQ(agents[0].incarnation, 7u);
  EXPECT_EQ(agents[0].last_msg_seq, 2u);
  EXPECT_EQ(agents[0].gaps, 0u);
  EXPECT_EQ(agents[0].stale, 2u);
}

}  // namespace
}  // namespace kvindex::consume
