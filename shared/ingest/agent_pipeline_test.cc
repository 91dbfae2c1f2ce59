// AgentPipeline end to end over real ZMQ sockets on loopback: XPUB engine
// publishers (subscription-aware, no slow-joiner sleeps) and ROUTER replay
// servers serving both layouts.
#include "shared/ingest/agent_pipeline.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <cstdio>
#include <cstdlib>

#include <chrono>
#include <thread>

#include "shared/ingest/testing/zmq_test_util.h"
#include "shared/publish/in_process_sink.h"

namespace kvindex::ingest {
namespace {

using testing::EnginePublisher;
using testing::GarbagePayload;
using testing::RecordingPublisher;
using testing::ReplayServer;
using testing::StoredBatch;

constexpr auto kWait = std::chrono::seconds(10);

class AgentPipelineTest : public ::testing::Test {
 protected:
  AgentPipelineTest() {
    options_.node = "node-a";
    options_.replay_timeout = std::chrono::milliseconds(300);
    options_.replay_cooldown = std::chrono::milliseconds(0);
  }

  SourceSpec Spec(const std::string& pub, const std::string& replay = "",
                  wire::EngineKind engine = wire::EngineKind::kVllm) {
    SourceSpec spec;
    spec.worker = "w0";
    spec.engine = engine;
    spec.model = "m";
    spec.block_size = testing::kBlockSize;
    spec.pub_endpoint = pub;
    spec.replay_endpoint = replay;
    return spec;
  }

  // Starts the pipeline and waits for the subscription and start-up replay.
  void StartAndWait(AgentPipeline& pipeline, std::vector<EnginePublisher*> publishers) {
    ASSERT_TRUE(pipeline.Start().ok());
    for (EnginePublisher* p : publishers) ASSERT_TRUE(p->WaitForSubscriber());
    ASSERT_TRUE(sink_.WaitFor([&] { return pipeline.Ready(); }, kWait));
  }

  std::string WaitRender(const std::string& expected) {
    return sink_.WaitForRender(expected, kWait);
  }

  zmq::context_t context_{1};
  AgentOptions options_;
  RecordingPublisher sink_;
};

TEST_F(AgentPipelineTest, StartupClearsThenReplaysFromZeroWithTopicLayout) {
  EnginePublisher engine(context_);
  ReplayServer replay(context_, ReplayServer::Layout::kWithTopic);
  for (uint64_t s = 0; s < 3; ++s) replay.Add(s, StoredBatch(s));
  options_.sources = {Spec(engine.endpoint(), replay.endpoint())};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});
  EXPECT_EQ(WaitRender("C|S0|S1|S2"), "C|S0|S1|S2");
  EXPECT_EQ(replay.requests(), std::vector<uint64_t>{0});
  // The live stream repeats seq 2 (published while the replay ran): overlap.
  engine.Send(2, StoredBatch(2));
  engine.Send(3, StoredBatch(3));
  EXPECT_EQ(WaitRender("C|S0|S1|S2|S3"), "C|S0|S1|S2|S3");
  const auto sources = pipeline.Sources();
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].last_seq, 3u);
  EXPECT_TRUE(sources[0].has_seq);
  EXPECT_EQ(sources[0].restarts, 0u);
  EXPECT_EQ(sources[0].replays_ok, 1u);
  pipeline.Stop();
}

TEST_F(AgentPipelineTest, GapReplaySucceedsWithoutTopicLayout) {
  EnginePublisher engine(context_);
  ReplayServer replay(context_, ReplayServer::Layout::kWithoutTopic);
  options_.sources = {Spec(engine.endpoint(), replay.endpoint())};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});
  engine.Send(0, StoredBatch(0));
  EXPECT_EQ(WaitRender("C|S0"), "C|S0");
  for (uint64_t s = 0; s < 5; ++s) replay.Add(s, StoredBatch(s));
  engine.Send(3, StoredBatch(3));  // 1 and 2 lost on the PUB side
  EXPECT_EQ(WaitRender("C|S0|S1|S2|S3"), "C|S0|S1|S2|S3");
  engine.Send(4, StoredBatch(4));
  EXPECT_EQ(WaitRender("C|S0|S1|S2|S3|S4"), "C|S0|S1|S2|S3|S4");
  EXPECT_EQ(replay.requests(), (std::vector<uint64_t>{0, 1}));
  const auto sources = pipeline.Sources();
  EXPECT_EQ(sources[0].gaps, 1u);
  EXPECT_EQ(sources[0].replays_ok, 2u);
  EXPECT_EQ(sources[0].restarts, 0u);
}

TEST_F(AgentPipelineTest, GapReplayTimeoutClears) {
  EnginePublisher engine(context_);
  ReplayServer replay(context_, ReplayServer::Layout::kWithTopic);
  replay.set_mode(ReplayServer::Mode::kSilent);
  options_.sources = {Spec(engine.endpoint(), replay.endpoint())};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});  // the start-up replay times out first
  engine.Send(0, StoredBatch(0));
  engine.Send(2, StoredBatch(2));
  EXPECT_EQ(WaitRender("C|S0|C S2"), "C|S0|C S2");
  EXPECT_EQ(pipeline.Sources()[0].replays_failed, 2u);
}

TEST_F(AgentPipelineTest, GapWithoutReplaySocketClears) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint())};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});
  engine.Send(0, StoredBatch(0));
  engine.Send(5, StoredBatch(5));
  EXPECT_EQ(WaitRender("C|S0|C S5"), "C|S0|C S5");
}

TEST_F(AgentPipelineTest, GapWhoseFirstReplayedSeqIsTooLateClears) {
  EnginePublisher engine(context_);
  ReplayServer replay(context_, ReplayServer::Layout::kWithTopic);
  options_.sources = {Spec(engine.endpoint(), replay.endpoint())};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});
  engine.Send(0, StoredBatch(0));
  EXPECT_EQ(WaitRender("C|S0"), "C|S0");
  for (uint64_t s = 3; s < 6; ++s) replay.Add(s, StoredBatch(s));  // 1, 2 evicted
  engine.Send(5, StoredBatch(5));
  EXPECT_EQ(WaitRender("C|S0|C S5"), "C|S0|C S5");
  EXPECT_EQ(replay.requests(), (std::vector<uint64_t>{0, 1}));
}

TEST_F(AgentPipelineTest, RestartsOnBackwardsOrEqualSeqAndEpochChange) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint(), "", wire::EngineKind::kSglang)};
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {&engine});
  const std::string epoch1 = std::string("kv\0sgl-kv-epoch=1", 17);
  const std::string epoch2 = std::string("kv\0sgl-kv-epoch=2", 17);
  engine.Send(0, StoredBatch(0), epoch1);
  engine.Send(1, StoredBatch(1), epoch1);
  engine.Send(0, StoredBatch(50), epoch1);  // backwards
  engine.Send(0, StoredBatch(51), epoch1);  // equal
  engine.Send(1, StoredBatch(52), epoch2);  // new epoch
  EXPECT_EQ(WaitRender("C|S0|S1|C S50|C S51|C S52"), "C|S0|S1|C S50|C S51|C S52");
  EXPECT_EQ(pipeline.Sources()[0].restarts, 3u);
}

TEST_F(AgentPipelineTest, DecodeErrorAndBadFramesNeverStopTheAgent) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint())};
  prometheus::Registry registry;
  AgentPipeline pipeline(options_, &sink_, &registry);
  StartAndWait(pipeline, {&engine});
  engine.Send(0, StoredBatch(0));
  engine.SendFrames({"t", testing::SeqBytes(1)});                           // 2 frames
  engine.SendFrames({"t", "short", StoredBatch(9)});                        // bad seq
  engine.SendFrames(std::vector<std::string>(20, "x"));                     // 20 frames
  engine.SendFrames({"t", testing::SeqBytes(1), StoredBatch(9), "extra"});  // 4 frames
  engine.Send(1, GarbagePayload());
  engine.Send(2, StoredBatch(2));
  EXPECT_EQ(WaitRender("C|S0|C|S2"), "C|S0|C|S2");
  // Metrics are synced after each wake-up of the source thread: wait for
  // all of them rather than assuming one wake-up.
  const std::vector<std::string> expected = {
      "kvindex_agent_decode_errors_total{source=\"w0/0\"} 1",
      "kvindex_agent_frames_invalid_total{reason=\"frame_count\",source=\"w0/0\"} 3",
      "kvindex_agent_frames_invalid_total{reason=\"seq_length\",source=\"w0/0\"} 1",
      "kvindex_agent_events_dropped_total{reason=\"decode_error\",source=\"w0/0\"} 1",
      "kvindex_agent_clears_total{cause=\"decode_error\",source=\"w0/0\"} 1",
      "kvindex_agent_last_sequence{source=\"w0/0\"} 2",
      "kvindex_agent_source_ready{source=\"w0/0\"} 1",
      "kvindex_agent_publish_latency_seconds_count",
  };
  prometheus::TextSerializer serializer;
  std::string text;
  const bool all_there = sink_.WaitFor(
      [&] {
        text = serializer.Serialize(registry.Collect());
        for (const std::string& line : expected) {
          if (text.find(line) == std::string::npos) return false;
        }
        return true;
      },
      kWait);
  for (const std::string& line : expected) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  EXPECT_TRUE(all_there);
}

TEST_F(AgentPipelineTest, MultiRankSourcesOnConsecutivePorts) {
  // Two XPUBs on consecutive free ports.
  std::unique_ptr<EnginePublisher> rank0, rank1;
  for (int attempt = 0; attempt < 50 && !rank1; ++attempt) {
    rank0 = std::make_unique<EnginePublisher>(context_);
    const std::string e = rank0->endpoint();
    const int port = std::stoi(e.substr(e.rfind(':') + 1));
    if (port >= 65535) continue;
    try {
      rank1 = std::make_unique<EnginePublisher>(context_,
                                                "tcp://127.0.0.1:" + std::to_string(port + 1));
    } catch (const zmq::error_t&) {
    }
  }
  ASSERT_TRUE(rank1) << "no two consecutive free ports";
  auto specs = ParseSourceSpec(
      "worker=w0,engine=vllm,model=m,block_size=16,pub=" + rank0->endpoint() + ",dp_ranks=2");
  ASSERT_TRUE(specs.ok()) << specs.status();
  options_.sources = *specs;
  AgentPipeline pipeline(options_, &sink_, nullptr);
  StartAndWait(pipeline, {rank0.get(), rank1.get()});
  rank0->Send(0, StoredBatch(0, 0));
  rank1->Send(0, StoredBatch(1, 1));
  rank1->Send(1, StoredBatch(2, 1));
  ASSERT_TRUE(sink_.WaitFor(
      [&] {
        int stored = 0;
        for (const auto& batch : sink_.batches()) {
          for (const auto& e : batch) stored += e.kind == PlacementKind::kStored;
        }
        return stored == 3;
      },
      kWait));
  int clears_rank0 = 0, clears_rank1 = 0;
  for (const auto& batch : sink_.batches()) {
    for (const auto& e : batch) {
      if (e.kind == PlacementKind::kCleared)
        (e.source.dp_rank == 0 ? clears_rank0 : clears_rank1)++;
      if (e.kind != PlacementKind::kStored) continue;
      EXPECT_EQ(e.source.worker, "w0");
      EXPECT_EQ(e.source.dp_rank, e.block_hashes[0] == testing::CanonicalOf(0) ? 0u : 1u);
    }
  }
  EXPECT_EQ(clears_rank0, 1);
  EXPECT_EQ(clears_rank1, 1);
  const auto sources = pipeline.Sources();
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].dp_rank, 0u);
  EXPECT_EQ(sources[0].last_seq, 0u);
  EXPECT_EQ(sources[1].dp_rank, 1u);
  EXPECT_EQ(sources[1].last_seq, 1u);
}

TEST_F(AgentPipelineTest, BindModeLetsTheEngineConnect) {
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  auto specs = ParseSourceSpec("worker=w0,engine=vllm,model=m,block_size=16,pub=bind:" + endpoint);
  ASSERT_TRUE(specs.ok()) << specs.status();
  options_.sources = *specs;
  AgentPipeline pipeline(options_, &sink_, nullptr);
  const Status started = pipeline.Start();
  ASSERT_TRUE(started.ok()) << started;
  EnginePublisher engine(context_, endpoint, /*connect=*/true);
  ASSERT_TRUE(engine.WaitForSubscriber());
  engine.Send(0, StoredBatch(0));
  EXPECT_EQ(WaitRender("C|S0"), "C|S0");
}

TEST_F(AgentPipelineTest, StampsEventsAndStartsAndStopsTwice) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint())};
  options_.heartbeat_lease_ms = 9000;
  AgentPipeline pipeline(options_, &sink_, nullptr);
  for (int run = 0; run < 2; ++run) {
    StartAndWait(pipeline, {&engine});
    engine.Send(10 + run, StoredBatch(10 + run));
    ASSERT_TRUE(sink_.WaitFor(
        [&] { return sink_.Render().find("S" + std::to_string(10 + run)) != std::string::npos; },
        kWait));
    pipeline.Stop();
    pipeline.Stop();  // idempotent
    EXPECT_FALSE(pipeline.Ready());
  }
  EXPECT_EQ(sink_.Render(), "C|S10|C|S11");
  uint64_t last_id = 0;
  int heartbeats = 0;
  for (const auto& batch : sink_.batches()) {
    for (const auto& e : batch) {
      EXPECT_EQ(e.agent, "node-a");
      EXPECT_GT(e.event_id, last_id);
      EXPECT_GT(e.timestamp_ns, 0u);
      last_id = e.event_id;
      if (e.kind == PlacementKind::kHeartbeat) {
        ++heartbeats;
        EXPECT_EQ(e.lease_ms, 9000u);
        ASSERT_EQ(e.sources.size(), 1u);
        EXPECT_EQ(e.sources[0].worker, "w0");
      }
    }
  }
  EXPECT_GE(heartbeats, 2);  // one at each start
}

TEST_F(AgentPipelineTest, FeedsAnInProcessSinkInOrder) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint())};
  InProcessSink sink(1024);
  AgentPipeline pipeline(options_, &sink, nullptr);
  ASSERT_TRUE(pipeline.Start().ok());
  ASSERT_TRUE(engine.WaitForSubscriber());
  ASSERT_TRUE(sink_.WaitFor([&] { return pipeline.Ready(); }, kWait));
  for (uint64_t s = 0; s < 5; ++s) engine.Send(s, StoredBatch(s));
  std::vector<PlacementEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  auto stored = [&] {
    int n = 0;
    for (const auto& e : events) n += e.kind == PlacementKind::kStored;
    return n;
  };
  while (stored() < 5 && std::chrono::steady_clock::now() < deadline) {
    sink.Drain(&events, 100, std::chrono::milliseconds(50));
  }
  pipeline.Stop();
  ASSERT_EQ(stored(), 5);
  std::vector<std::vector<PlacementEvent>> as_batches;
  for (const auto& e : events) as_batches.push_back({e});
  EXPECT_EQ(testing::Renderer().Batches(as_batches), "C|S0|S1|S2|S3|S4");
}

// A publisher closed for good (FailedPrecondition, PlacementPublisher) is
// not retried: the events are dropped once, instead of a retry loop that
// holds the publish lock until the pipeline stops.
TEST_F(AgentPipelineTest, AClosedPublisherIsNotRetried) {
  EnginePublisher engine(context_);
  options_.sources = {Spec(engine.endpoint())};
  InProcessSink closed(16);
  closed.Close();
  prometheus::Registry registry;
  AgentPipeline pipeline(options_, &closed, &registry);
  ASSERT_TRUE(pipeline.Start().ok());
  ASSERT_TRUE(engine.WaitForSubscriber());
  engine.Send(0, StoredBatch(0));
  auto errors = [&] {
    for (const auto& family : registry.Collect()) {
      if (family.name != "kvindex_agent_publish_errors_total") continue;
      for (const auto& metric : family.metric) return metric.counter.value;
    }
    return -1.0;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double first = errors();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // retries back off to 1 s
  const double later = errors();
  pipeline.Stop();
  EXPECT_GE(first, 1);  // the start-up clear, the heartbeat, the batch: once each
  EXPECT_EQ(later, first) << "publishes to a closed publisher are retried";
}

TEST_F(AgentPipelineTest, SameWorkerOnTwoEndpointsKeepsMetricSeriesApart) {
  EnginePublisher a(context_), b(context_);
  options_.sources = {Spec(a.endpoint()), Spec(b.endpoint())};
  prometheus::Registry registry;
  AgentPipeline pipeline(options_, &sink_, &registry);
  StartAndWait(pipeline, {&a, &b});
  prometheus::TextSerializer serializer;
  const std::string text = serializer.Serialize(registry.Collect());
  EXPECT_NE(text.find("source=\"w0/0@" + a.endpoint() + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("source=\"w0/0@" + b.endpoint() + "\""), std::string::npos);
  EXPECT_EQ(text.find("source=\"w0/0\""), std::string::npos);
}

// Reproduction (issue #21): about 340 --source entries per process was a
// hidden limit (libzmq's 1,023 sockets per context) failing as "Too many open
// files". 1,000 sources start; the socket cap is sized to fit.
TEST_F(AgentPipelineTest, AThousandSourcesStart) {
  for (int i = 0; i < 1000; ++i) {
    // Abstract IPC names nobody binds: the connects are retried quietly.
    SourceSpec spec =
        Spec("ipc://@kvindex-test-" + std::to_string(getpid()) + "-" + std::to_string(i));
    spec.worker = "w" + std::to_string(i);
    options_.sources.push_back(spec);
  }
  AgentPipeline pipeline(options_, &sink_, nullptr);
  const Status status = pipeline.Start();
  EXPECT_TRUE(status.ok()) << status;
  pipeline.Stop();
}

// Lowers the hard open-file limit to 512, starts `options` and exits 0 when
// Start failed with FailedPrecondition (its message on stderr).
[[noreturn]] void StartUnderLowFileLimit(const AgentOptions& options, PlacementPublisher* sink) {
  rlimit low{};
  low.rlim_cur = 512;
  low.rlim_max = 512;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) std::_Exit(3);
  AgentPipeline pipeline(options, sink, nullptr);
  const Status status = pipeline.Start();
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  std::_Exit(absl::IsFailedPrecondition(status) ? 0 : 1);
}

// When the process may not open enough files, Start says so and how to fix it
// (in a child: a lowered hard limit cannot be raised again).
TEST_F(AgentPipelineTest, TooLowFileLimitIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (int i = 0; i < 1000; ++i) {
    SourceSpec spec =
        Spec("ipc://@kvindex-test-" + std::to_string(getpid()) + "-" + std::to_string(i));
    spec.worker = "w" + std::to_string(i);
    options_.sources.push_back(spec);
  }
  EXPECT_EXIT(StartUnderLowFileLimit(options_, &sink_), ::testing::ExitedWithCode(0),
              "1000 source\\(s\\) need about 6256 file descriptors.*ulimit -n");
}

TEST_F(AgentPipelineTest, StartFailsCleanlyOnBadEndpoints) {
  options_.sources = {Spec("nonsense://x")};
  AgentPipeline bad(options_, &sink_, nullptr);
  EXPECT_EQ(bad.Start().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(bad.Ready());

  EnginePublisher engine(context_);  // owns the port
  options_.sources = {Spec(engine.endpoint())};
  options_.sources[0].pub_bind = true;
  AgentPipeline in_use(options_, &sink_, nullptr);
  EXPECT_EQ(in_use.Start().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(sink_.batches().empty());  // nothing published on failure

  options_.node.clear();
  AgentPipeline invalid(options_, &sink_, nullptr);
  EXPECT_EQ(invalid.Start().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvindex::ingest
