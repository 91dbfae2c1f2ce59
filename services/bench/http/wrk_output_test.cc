#include "services/bench/http/wrk_output.h"

#include <gtest/gtest.h>

namespace kvindex::bench {
namespace {

constexpr char kSample[] = R"(Running 5s test @ http://127.0.0.1:18777/v1/match
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   205.11us  120.31us   4.87ms   90.12%
    Req/Sec   110.70k     5.01k  118.33k    74.00%
  Latency Distribution
     50%  166.00us
     75%  230.00us
     90%  320.00us
     99%  585.00us
  551000 requests in 5.00s, 80.12MB read
  Socket errors: connect 0, read 0, write 0, timeout 2
  Non-2xx or 3xx responses: 3
Requests/sec: 110654.08
Transfer/sec:     16.02MB
)";

TEST(WrkOutputTest, ParsesReport) {
  auto report = ParseWrkOutput(kSample);
  ASSERT_TRUE(report.has_value());
  EXPECT_DOUBLE_EQ(report->requests_per_second, 110654.08);
  EXPECT_DOUBLE_EQ(report->p50_seconds, 166e-6);
  EXPECT_DOUBLE_EQ(report->p99_seconds, 585e-6);
  EXPECT_DOUBLE_EQ(report->p90_seconds, 320e-6);
  EXPECT_EQ(report->requests, 551000u);
  EXPECT_EQ(report->errors, 5u);
  EXPECT_FALSE(ParseWrkOutput("garbage").has_value());
}

TEST(WrkOutputTest, Durations) {
  EXPECT_DOUBLE_EQ(*ParseWrkDuration("1.50ms"), 1.5e-3);
  EXPECT_DOUBLE_EQ(*ParseWrkDuration("2s"), 2.0);
  EXPECT_FALSE(ParseWrkDuration("3parsecs").has_value());
}

}  // namespace
}  // namespace kvindex::bench
