#include "services/mockengine/cluster.h"

#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "shared/http/server.h"

namespace kvindex::mockengine {
namespace {

// A small trace: 3 roots, growing conversations that reuse their prefix.
std::vector<trace::TraceRequest> Trace(size_t n) {
  std::vector<trace::TraceRequest> out;
  for (size_t r = 0; r < n; ++r) {
    trace::TraceRequest t;
    t.output_length = 10;
    t.hash_ids = {r % 3, 100 + r % 3};
    for (size_t turn = 0; turn < r / 3 % 4; ++turn) t.hash_ids.push_back(1000 + r % 3 * 10 + turn);
    out.push_back(std::move(t));
  }
  return out;
}

ClusterOptions Options() {
  ClusterOptions o;
  o.models = {"ma", "mb"};
  for (int i = 0; i < 4; ++i) {
    o.workers.push_back(WorkerConfig{.device = 200,
                                     .host = 100,
                                     .disk = 100,
                                     .dp_ranks = 1u + static_cast<uint32_t>(i % 2),
                                     .model = o.models[i % 2]});
  }
  o.dry_run = true;
  o.seed = 4;
  return o;
}

nlohmann::json Simulate(ClusterOptions o, size_t n) {
  Cluster cluster(std::move(o), Trace(n), "t.jsonl");
  std::atomic<bool> stop{false};
  cluster.Run(stop, std::chrono::milliseconds(0));
  EXPECT_TRUE(cluster.done());
  return {{"truth", nlohmann::json::parse(cluster.TruthJson())},
          {"report", nlohmann::json::parse(cluster.ReportJson())},
          {"progress", nlohmann::json::parse(cluster.ProgressJson())}};
}

TEST(ClusterTest, DryRunReportsAndIsDeterministic) {
  const nlohmann::json a = Simulate(Options(), 120);
  const auto& report = a["report"];
  EXPECT_EQ(report["requests"], 120);
  EXPECT_EQ(report["workers"], 4);
  uint64_t placed = 0;
  for (const auto& n : report["load"]["requests_per_worker"]) placed += n.get<uint64_t>();
  EXPECT_EQ(placed, 120u);
  EXPECT_GT(report["hit_rate"].get<double>(), 0.3);  // conversations reuse their prefix
  EXPECT_EQ(a["progress"]["requests_done"], 120);
  // Sources: (worker, rank) pairs, models by worker index.
  const auto& sources = a["truth"]["sources"];
  ASSERT_EQ(sources.size(), 6u);
  EXPECT_EQ(sources[1]["worker"], "w1");
  EXPECT_EQ(sources[1]["model"], "mb");
  EXPECT_EQ(sources[2]["dp_rank"], 1);
  EXPECT_EQ(a["truth"]["digest"], a["truth"]["stored_since_clear_digest"]);
  const nlohmann::json b = Simulate(Options(), 120);  // same seed, same run
  EXPECT_TRUE(b["truth"] == a["truth"] && b["report"] == a["report"]);
}

TEST(ClusterTest, FaultCountsAreExactAndClearedSourcesMarked) {
  ClusterOptions o = Options();
  for (FaultKind kind : {FaultKind::kDrop, FaultKind::kGap, FaultKind::kRestart,
                         FaultKind::kMalformed, FaultKind::kSlow}) {
    o.faults[static_cast<int>(kind)] = *ParseFaultSpec("2");
  }
  const nlohmann::json a = Simulate(o, 120);
  for (const char* kind : {"drop", "gap", "restart", "malformed", "slow"}) {
    EXPECT_EQ(a["report"]["faults"][kind], 2) << kind;
  }
  int cleared = 0;
  for (const auto& s : a["truth"]["sources"]) cleared += s["cleared_by_fault"].get<bool>();
  EXPECT_GT(cleared, 0);
  EXPECT_NE(a["truth"]["digest"], a["truth"]["stored_since_clear_digest"]);
  const nlohmann::json b = Simulate(o, 120);
  EXPECT_TRUE(b["truth"] == a["truth"] && b["report"] == a["report"]);
}

// Each kind alone: a clear-causing fault marks exactly its source, a
// recoverable one (replay socket configured) marks none.
TEST(ClusterTest, EachFaultKindClearsOnlyWhenUnrecoverable) {
  for (FaultKind kind : {FaultKind::kDrop, FaultKind::kGap, FaultKind::kRestart,
                         FaultKind::kMalformed, FaultKind::kSlow}) {
    ClusterOptions o = Options();
    o.faults[static_cast<int>(kind)] = *ParseFaultSpec("1");
    const nlohmann::json a = Simulate(o, 120);
    int cleared = 0;
    for (const auto& s : a["truth"]["sources"]) cleared += s["cleared_by_fault"].get<bool>();
    const bool clears = kind != FaultKind::kDrop && kind != FaultKind::kSlow;
    EXPECT_EQ(cleared, clears ? 1 : 0) << FaultKindName(kind);
    EXPECT_EQ(a["report"]["faults"][std::string(FaultKindName(kind))], 1);
    if (!clears) {
      EXPECT_EQ(a["truth"]["digest"], a["truth"]["stored_since_clear_digest"]);
    }
  }
  // Without a replay socket a drop cannot be recovered.
  ClusterOptions o = Options();
  o.replay_base_port = 0;
  o.faults[static_cast<int>(FaultKind::kDrop)] = *ParseFaultSpec("1");
  const nlohmann::json a = Simulate(o, 120);
  int cleared = 0;
  for (const auto& s : a["truth"]["sources"]) cleared += s["cleared_by_fault"].get<bool>();
  EXPECT_EQ(cleared, 1) << a["report"]["faults"].dump();
}

// The truth API's readers (HTTP threads) while the simulation runs: every
// snapshot is consistent (the progress never goes backwards, the truth's
// requests_done matches its own progress), and under TSan no race.
TEST(ClusterTest, ReadersDuringTheRunSeeConsistentSnapshots) {
  Cluster cluster(Options(), Trace(400), "t.jsonl");
  std::atomic<bool> stop{false};
  std::thread run([&] { cluster.Run(stop, std::chrono::milliseconds(0)); });
  uint64_t last_done = 0, snapshots = 0;
  std::string answer;
  // As the HTTP server hands it over: kBodyPadding readable bytes after it.
  const std::string_view query = R"({"model": "ma", "tokens": [1, 2, 3]})";
  std::string padded(query);
  padded.append(http::kBodyPadding, '\0');
  while (!cluster.done() || snapshots < 3) {
    const auto progress = nlohmann::json::parse(cluster.ProgressJson());
    const uint64_t done = progress["requests_done"].get<uint64_t>();
    EXPECT_GE(done, last_done);
    last_done = done;
    const auto truth = nlohmann::json::parse(cluster.TruthJson());
    EXPECT_GE(truth["requests_done"].get<uint64_t>(), done);
    EXPECT_EQ(cluster.MatchJson(std::string_view(padded.data(), query.size()), false, &answer), 200)
        << answer;
    ++snapshots;
  }
  run.join();
  EXPECT_GE(snapshots, 3u);
  EXPECT_EQ(nlohmann::json::parse(cluster.ProgressJson())["requests_done"], 400);
}

}  // namespace
}  // namespace kvindex::mockengine
