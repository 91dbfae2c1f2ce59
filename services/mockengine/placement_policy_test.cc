#include "services/mockengine/placement_policy.h"

#include <gtest/gtest.h>

#include "services/mockengine/cluster_options.h"
#include "services/mockengine/load_model.h"

namespace kvindex::mockengine {
namespace {

std::vector<Candidate> Three(uint32_t l0, uint32_t l1, uint32_t l2) {
  return {{{"w0", 0}, l0}, {{"w1", 0}, l1}, {{"w2", 0}, l2}};
}

index::WorkerMatch Row(std::string worker, uint32_t device, uint32_t host, uint32_t disk) {
  index::WorkerMatch m;
  m.source = {std::move(worker), 0};
  m.device = device;
  m.host = host;
  m.disk = disk;
  m.longest = device + host + disk;
  return m;
}

TEST(PlacementPolicyTest, RoundRobinPerModel) {
  PlacementPolicy p(Policy::kRoundRobin, 1, 2);
  const auto c = Three(0, 0, 0);
  EXPECT_EQ(p.Place(0, c, nullptr), 0u);
  EXPECT_EQ(p.Place(0, c, nullptr), 1u);
  EXPECT_EQ(p.Place(1, c, nullptr), 0u);
  EXPECT_EQ(p.Place(0, c, nullptr), 2u);
  EXPECT_EQ(p.Place(0, c, nullptr), 0u);
}

TEST(PlacementPolicyTest, LeastLoadedTiesInTurn) {
  PlacementPolicy p(Policy::kLeastLoaded, 1, 1);
  EXPECT_EQ(p.Place(0, Three(3, 1, 1), nullptr), 1u);  // start 0: w1 before w2
  EXPECT_EQ(p.Place(0, Three(3, 1, 1), nullptr), 1u);  // start 1
  EXPECT_EQ(p.Place(0, Three(3, 1, 1), nullptr), 2u);  // start 2: w2 first
  // An idle fleet: every worker in turn, not the first one every time.
  EXPECT_EQ(p.Place(0, Three(0, 0, 0), nullptr), 0u);
  EXPECT_EQ(p.Place(0, Three(0, 0, 0), nullptr), 1u);
  EXPECT_EQ(p.Place(0, Three(0, 0, 0), nullptr), 2u);
}

TEST(PlacementPolicyTest, KvAwareWeighsTiersThenLoad) {
  PlacementPolicy p(Policy::kKvAware, 1, 1, /*load_weight=*/0);
  index::MatchResult m;
  // w1: 4 device = 4; w2: 6 host = 3; w0: 10 disk = 2.5.
  m.workers = {Row("w0", 0, 0, 10), Row("w1", 4, 0, 0), Row("w2", 0, 6, 0)};
  EXPECT_EQ(p.Place(0, Three(0, 5, 0), &m), 1u);
  // Equal scores: fewer in flight wins; a full tie goes in turn.
  m.workers = {Row("w0", 2, 0, 0), Row("w2", 0, 4, 0)};
  EXPECT_EQ(p.Place(0, Three(3, 0, 1), &m), 2u);  // w2: fewer in flight than w0
  EXPECT_EQ(p.Place(0, Three(1, 0, 1), &m), 2u);  // full tie; call 3 starts at w2
  EXPECT_EQ(p.Place(0, Three(1, 0, 1), &m), 0u);  // full tie; call 4 starts at w0
  // No answer (match failed): least-loaded.
  EXPECT_EQ(p.Place(0, Three(2, 1, 0), nullptr), 2u);
}

TEST(PlacementPolicyTest, KvAwarePricesTheQueue) {
  PlacementPolicy p(Policy::kKvAware, 1, 1, /*load_weight=*/0.25);
  index::MatchResult m;
  m.workers = {Row("w0", 32, 0, 0)};
  // A shared 32-block head of a 400-block prompt does not outweigh 3 queued
  // requests (368 + 300 > 400)...
  EXPECT_EQ(p.Place(0, Three(3, 0, 0), &m, 400), 1u);
  // ...a 380-block reuse does (20 + 100 < 400).
  m.workers = {Row("w0", 380, 0, 0)};
  EXPECT_EQ(p.Place(0, Three(1, 0, 0), &m, 400), 0u);
}

TEST(PlacementPolicyTest, RandomIsSeeded) {
  PlacementPolicy a(Policy::kRandom, 42, 1), b(Policy::kRandom, 42, 1);
  const auto c = Three(0, 0, 0);
  std::vector<size_t> seen(3, 0);
  for (int i = 0; i < 300; ++i) {
    const size_t x = a.Place(0, c, nullptr);
    EXPECT_EQ(x, b.Place(0, c, nullptr));
    ++seen[x];
  }
  for (size_t n : seen) EXPECT_GT(n, 50u);
}

TEST(LoadModelTest, InFlightFollowsTheSimulatedClock) {
  LoadModel load({.prefill_us_per_token = 10, .decode_us_per_token = 100}, 2);
  EXPECT_EQ(load.InFlight(0, 0), 0u);
  EXPECT_DOUBLE_EQ(load.Start(0, 0, 100, 10, 1.0), 2000);  // 100*10 + 10*100
  EXPECT_DOUBLE_EQ(load.Start(0, 0, 100, 10, 2.0), 1000);  // twice as fast
  EXPECT_EQ(load.InFlight(0, 500), 2u);
  EXPECT_EQ(load.InFlight(1, 500), 0u);
  EXPECT_EQ(load.InFlight(0, 1000), 1u);  // finished at 1000
  EXPECT_EQ(load.InFlight(0, 2000), 0u);
}

TEST(LoadModelTest, MaxRunningQueuesFirstComeFirstServed) {
  // Source 0 runs 2 at once; source 1 has no limit. Service 1000 us each
  // (10 output tokens x 100 us), each request holding 5 device blocks.
  LoadModel load({.prefill_us_per_token = 10, .decode_us_per_token = 100}, 2, {2});
  double wait = -1;
  for (int i = 0; i < 4; ++i) {
    load.Start(0, 0, 0, 10, 1.0, 5, &wait);
    EXPECT_DOUBLE_EQ(wait, i < 2 ? 0 : 1000) << i;
    load.Start(1, 0, 0, 10, 1.0, 5);
  }
  SourceLoad at0 = load.Load(0, 0);
  EXPECT_EQ(at0.running, 2u);
  EXPECT_EQ(at0.waiting, 2u);
  EXPECT_EQ(at0.blocks, 10u);  // a waiting request holds no blocks yet
  EXPECT_EQ(load.InFlight(0, 0), 4u);
  SourceLoad at1 = load.Load(1, 0);
  EXPECT_EQ(at1.running, 4u);
  EXPECT_EQ(at1.waiting, 0u);
  EXPECT_EQ(at1.blocks, 20u);
  // A fifth arrives at 500: both slots free at 2000 (the third and fourth
  // run 1000..2000), so it starts at 2000.
  load.Start(0, 500, 0, 10, 1.0, 5, &wait);
  EXPECT_DOUBLE_EQ(wait, 1500);
  at0 = load.Load(0, 1000);  // the first two finished, the next two started
  EXPECT_EQ(at0.running, 2u);
  EXPECT_EQ(at0.waiting, 1u);
  EXPECT_EQ(at0.blocks, 10u);
  at0 = load.Load(0, 2500);
  EXPECT_EQ(at0.running, 1u);
  EXPECT_EQ(at0.waiting, 0u);
  EXPECT_EQ(at0.blocks, 5u);
  at0 = load.Load(0, 3000);
  EXPECT_EQ(at0.running + at0.waiting, 0u);
  EXPECT_EQ(at0.blocks, 0u);
  // Idle again: the next one starts at once.
  load.Start(0, 3000, 0, 10, 1.0, 5, &wait);
  EXPECT_DOUBLE_EQ(wait, 0);
}

TEST(LoadModelTest, ArrivalsFromTimestampsElseRate) {
  std::vector<trace::TraceRequest> r(3);
  EXPECT_EQ(ArrivalTimesUs(r, 100), (std::vector<double>{0, 10000, 20000}));
  r[1].timestamp_ms = 5;
  r[2].timestamp_ms = 7;
  EXPECT_EQ(ArrivalTimesUs(r, 100), (std::vector<double>{0, 5000, 7000}));
}

TEST(ClusterOptionsTest, OverridesAndSourceStrings) {
  ClusterOptions o;
  o.models = {"a", "b"};
  o.workers = {WorkerConfig{.model = "a"}, WorkerConfig{.model = "b"}};
  ASSERT_TRUE(
      ApplyEngineOverride("index=0,wire=sglang,dp_ranks=2,disk=9,cpu_events=tokens", &o).ok());
  EXPECT_EQ(o.workers[0].disk, 9u);
  EXPECT_TRUE(o.workers[0].cpu_events_tokens);
  EXPECT_FALSE(ApplyEngineOverride("index=2,wire=sglang", &o).ok());
  EXPECT_FALSE(ApplyEngineOverride("index=1,wire=tgi", &o).ok());
  EXPECT_FALSE(ApplyEngineOverride("index=1,model=c", &o).ok());
  EXPECT_FALSE(ApplyEngineOverride("index=1,colour=red", &o).ok());
  ASSERT_TRUE(ApplyEngineOverride("index=1,max_running=4", &o).ok());
  EXPECT_EQ(o.workers[1].max_running, 4u);
  EXPECT_FALSE(ApplyEngineOverride("index=1,max_running=-1", &o).ok());
  const auto s = SourceStrings(o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0],
            "worker=w0,engine=sglang,model=a,block_size=16,pub=tcp://127.0.0.1:5557,"
            "replay=tcp://127.0.0.1:5657,dp_ranks=2");
  // Ranks take consecutive ports: w1 starts after w0's two.
  EXPECT_EQ(s[1],
            "worker=w1,engine=vllm,model=b,block_size=16,pub=tcp://127.0.0.1:5559,"
            "replay=tcp://127.0.0.1:5659");
}

}  // namespace
}  // namespace kvindex::mockengine
