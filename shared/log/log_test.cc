#include "shared/log/log.h"

#include <gtest/gtest.h>

#include <thread>

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
  RateLimiter limiter(std::chrono::hours(1));
  uint64_t suppressed = 99;
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  RateLimiter fast(std::chrono::nanoseconds(1));
  EXPECT_TRUE(fast.Allow(&suppressed));
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(fast.Allow(&suppressed));
}

}  // namespace
}  // namespace kvindex::log
