// Load signals (docs/epp.md, "Load signals"): engines' /metrics parsed,
// scraped from a real HTTP server playing the engine, kept per source with
// an age limit, and scored by the picker.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "shared/epp/engine_metrics.h"
#include "shared/epp/load_scraper.h"
#include "shared/epp/load_table.h"
#include "shared/epp/picker.h"
#include "shared/http/server.h"
#include "shared/index/kv_index.h"

namespace kvindex::epp {
namespace {

Endpoint Ep(const std::string& address, const std::string& worker) {
  Endpoint endpoint;
  endpoint.address = address;
  endpoint.source.worker = worker;
  endpoint.model = "m";
  return endpoint;
}

using namespace std::chrono_literals;

TEST(EngineMetricsTest, ReadsVllmAndSglangGauges) {
  const codec::EngineLoad vllm = ParseEngineMetrics(
      "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
      "# TYPE vllm:num_requests_waiting gauge\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m{x}\"} 3.0\n"
      "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 7 1700000000000\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n"
      "vllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n"
      "vllm:num_requests_waiting_total 99\n"
      "vllm:num_requests_running{broken 5\n");
  EXPECT_EQ(vllm.waiting, 5);
  EXPECT_EQ(vllm.running, 7);
  EXPECT_EQ(vllm.kv_use, 0.5);
  const codec::EngineLoad sglang = ParseEngineMetrics(
      "sglang:num_queue_reqs{model_name=\"m\"} 4\nsglang:num_running_reqs 1\n"
      "sglang:token_usage 0.75\n");
  EXPECT_EQ(sglang.waiting, 4);
  EXPECT_EQ(sglang.running, 1);
  EXPECT_EQ(sglang.kv_use, 0.75);
  const codec::EngineLoad none =
      ParseEngineMetrics("other_metric 1\nvllm:kv_cache_usage_perc NaN\n");
  EXPECT_EQ(none.waiting, -1);
  EXPECT_EQ(none.kv_use, -1);
}

TEST(LoadTableTest, StaleSamplesAreNotUsedAndCounted) {
  LoadTable table(100ms);
  const auto t0 = LoadTable::Clock::now();
  codec::EngineLoad load;
  load.waiting = 3;
  table.Update({"w0", 0}, load, t0);
  ASSERT_TRUE(table.Fresh({"w0", 0}, t0 + 50ms).has_value());
  EXPECT_EQ(table.Fresh({"w0", 0}, t0 + 50ms)->waiting, 3);
  EXPECT_FALSE(table.Fresh({"w0", 0}, t0 + 150ms).has_value());
  EXPECT_FALSE(table.Fresh({"w1", 0}, t0).has_value());
  EXPECT_EQ(table.stale(), 1u);
}

// The picker's batch read: the fresh samples of many sources under one
// lock, the same as Fresh one by one, stale ones counted.
TEST(LoadTableTest, FreshEachAgreesWithFresh) {
  LoadTable table(100ms);
  const auto t0 = LoadTable::Clock::now();
  codec::EngineLoad load;
  load.waiting = 3;
  table.Update({"w0", 0}, load, t0);
  load.waiting = 5;
  table.Update({"w1", 1}, load, t0 + 80ms);
  const std::vector<SourceKey> sources = {{"w1", 1}, {"w2", 0}, {"w0", 0}, {"w1", 0}, {"w1", 1}};
  std::vector<int> seen;
  table.FreshEach(
      sources.size(), [&](size_t i) -> const SourceKey& { return sources[i]; }, t0 + 150ms,
      [&](size_t i, const codec::EngineLoad& l) {
        seen.push_back(static_cast<int>(i));
        EXPECT_EQ(l.waiting, 5);
      });
  EXPECT_EQ(seen, (std::vector<int>{0, 4}));  // w0's sample is 150 ms old
  EXPECT_EQ(table.stale(), 1u);
  for (size_t i = 0; i < sources.size(); ++i) {
    const bool fresh = table.Fresh(sources[i], t0 + 150ms).has_value();
    EXPECT_EQ(fresh, i == 0 || i == 4) << i;
  }
}

// A real HTTP server plays the engine's /metrics; the scraper reads it and
// reports an engine that stops answering as unhealthy.
TEST(LoadScraperTest, ScrapesAnEnginesMetricsAndReportsItsAbsence) {
  std::atomic<int> waiting{6};
  http::ServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = std::make_unique<http::Server>(options);
  server->Handle("GET", "/metrics", [&waiting](const http::Request&, http::Response& r) {
    r.content_type = "text/plain";
    r.body = "vllm:num_requests_waiting{model_name=\"m\"} " + std::to_string(waiting.load()) +
             "\nvllm:kv_cache_usage_perc 0.4\n";
  });
  ASSERT_TRUE(server->Start().ok());
  const std::string endpoint = "127.0.0.1:" + std::to_string(server->port());
  std::vector<codec::SourceLoad> seen;
  std::vector<ScrapeTarget> targets(2);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    targets[rank].source.worker = "w0";
    targets[rank].source.dp_rank = rank;
    targets[rank].endpoint = endpoint;
  }
  LoadScraper scraper(
      targets, {}, [&seen](const std::vector<codec::SourceLoad>& s) { seen = s; }, nullptr, "");
  scraper.ScrapeOnce();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].source, (SourceKey{"w0", 0}));
  EXPECT_EQ(seen[1].source, (SourceKey{"w0", 1}));
  EXPECT_TRUE(seen[0].load.healthy);
  EXPECT_EQ(seen[0].load.waiting, 6);
  EXPECT_EQ(seen[1].load.kv_use, 0.4);
  server->Stop();
  server.reset();
  scraper.ScrapeOnce();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].load.healthy);
}

class LoadPickerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    endpoints_.SetStatic(
        {Ep("10.0.0.1:8000", "w0"), Ep("10.0.0.2:8000", "w1"), Ep("10.0.0.3:8000", "w2")});
  }
  void Load(const std::string& worker, double waiting, double kv_use, bool healthy = true,
            LoadTable::Clock::time_point at = LoadTable::Clock::now()) {
    codec::EngineLoad load;
    load.waiting = waiting;
    load.kv_use = kv_use;
    load.healthy = healthy;
    load_.Update({worker, 0}, load, at);
  }
  std::string Best(const PickerConfig& config = {}) {
    Picker picker(config, &index_, &endpoints_, &load_);
    PickInput input;
    input.model = "m";
    auto pick = picker.Pick(input);
    return pick.ok() ? pick->endpoints[0] : std::string(pick.status().message());
  }
  index::KvIndex index_;
  EndpointTable endpoints_;
  LoadTable load_{1000ms};
};

TEST_F(LoadPickerTest, ShortestQueueAndFreestCacheWin) {
  Load("w0", 5, 0.1);
  Load("w1", 0, 0.9);
  Load("w2", 5, 0.9);
  // w0: kv 0.9 + queue 0 = 0.9; w1: 0.1 + 1 = 1.1; w2: 0.1 + 0 = 0.1.
  EXPECT_EQ(Best(), "10.0.0.2:8000");
  PickerConfig kv_heavy;
  kv_heavy.kv_cache_weight = 3;  // w0: 2.7; w1: 1.3
  EXPECT_EQ(Best(kv_heavy), "10.0.0.1:8000");
}

TEST_F(LoadPickerTest, UnhealthyStaleAndFullEnginesAreLeftOut) {
  Load("w0", 0, 0.0, /*healthy=*/false);
  Load("w1", 2, 0.5);
  Load("w2", 0, 0.0, true, LoadTable::Clock::now() - 5s);  // stale: no signal, scores 0
  EXPECT_EQ(Best(), "10.0.0.2:8000");
  PickerConfig shed;
  shed.max_queue_per_endpoint = 2;  // w1 full; w2 has no fresh sample: eligible
  EXPECT_EQ(Best(shed), "10.0.0.3:8000");
  Load("w2", 2, 0.0);
  EXPECT_NE(Best(shed).find("limit"), std::string::npos);
  Load("w1", 0, 0.0, false);
  Load("w2", 0, 0.0, false);
  EXPECT_NE(Best().find("unhealthy"), std::string::npos);
}

}  // namespace
}  // namespace kvindex::epp
