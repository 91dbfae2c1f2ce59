#include "shared/log/log.h"

#include <gtest/gtest.h>

namespace kvindex::log {
namespace {

TEST(LogTest, InitValidatesArguments) {
  EXPECT_TRUE(Init("text", "info").ok());
  EXPECT_TRUE(Init("json", "debug").ok());
  EXPECT_EQ(Init("xml", "info").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Init("text", "loud").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Init("text", "off").ok());
}

TEST(LogTest, JsonLinesAreEscaped) {
  ASSERT_TRUE(Init("json", "info").ok());
  testing::internal::CaptureStderr();
  Get("logtest")->info("quote \" backslash \\ newline \n end");
  Get("logtest")->flush();
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find(R"("logger":"logtest")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(quote \" backslash \\ newline \n end)"), std::string::npos) << out;
  ASSERT_TRUE(Init("text", "info").ok());
}

TEST(LogTest, SameLoggerForSameSubsystem) { EXPECT_EQ(Get("a").get(), Get("a").get()); }

TEST(RateLimiterTest, FirstAllowedThenSuppressedAndCounted) {
  using std::chrono::seconds;
  RateLimiter limiter(seconds(10));
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(&suppressed, t0));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(limiter.Allow(&suppressed, t0 + seconds(i)));
  EXPECT_FALSE(limiter.Allow(&suppressed, t0 + seconds(10) - std::chrono::nanoseconds(1)));
  // The next interval: allowed, and told how many were held back.
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(10)));
  EXPECT_EQ(suppressed, 6u);
  EXPECT_FALSE(limiter.Allow(&suppressed, t0 + seconds(11)));
  EXPECT_TRUE(limiter.Allow(&suppressed, t0 + seconds(25)));
  EXPECT_EQ(suppressed, 1u);
}

}  // namespace
}  // namespace kvindex::log
