#include "services/router/router.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "shared/http/client.h"

namespace kvindex::router {
namespace {

RouterOptions TestOptions() {
  RouterOptions options;
  options.http = "127.0.0.1:0";
  options.http_threads = 4;
  options.data_dir = (std::filesystem::temp_directory_path() /
                      ("kvindex-router-test-" + std::to_string(::getpid())))
                         .string();
  options.embedded = true;
  options.agent.node = "test-node";
  auto specs =
      ingest::ParseSourceSpec("worker=w0,engine=vllm,model=m,block_size=4,pub=tcp://127.0.0.1:1");
  EXPECT_TRUE(specs.ok()) << specs.status();
  if (specs.ok()) options.agent.sources = *specs;
  options.agent.replay_timeout = std::chrono::milliseconds(100);
  return options;
}

TEST(RouterTest, StartStopTwice) {
  Router router(TestOptions());
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(router.Start().ok());
    ASSERT_TRUE(router.Start().ok());
    ASSERT_NE(router.port(), 0);
    http::ClientRequest request;
    request.url.host = "127.0.0.1";
    request.url.port = router.port();
    request.path = "/healthz";
    auto response = http::Fetch(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status, 200);
    router.Stop();
    router.Stop();
  }
  EXPECT_TRUE(std::filesystem::is_directory(TestOptions().data_dir));
  std::filesystem::remove_all(TestOptions().data_dir);
}

TEST(RouterTest, BusyPortFailsCleanly) {
  Router first(TestOptions());
  ASSERT_TRUE(first.Start().ok());
  RouterOptions options = TestOptions();
  options.http = "127.0.0.1:" + std::to_string(first.port());
  Router second(options);
  EXPECT_EQ(second.Start().code(), absl::StatusCode::kUnavailable);
  second.Stop();
  first.Stop();
  std::filesystem::remove_all(TestOptions().data_dir);
}

TEST(RouterTest, Validate) {
  RouterOptions options = TestOptions();
  options.embedded = false;  // and no --nats URL
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.nats.url = "nats://127.0.0.1:4222";  // --source needs --embedded
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options.agent.sources.clear();
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  options = TestOptions();
  options.data_dir.clear();
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options = TestOptions();
  options.agent.sources.clear();  // only engines registered over HTTP
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();
  options.max_registrations = 0;  // and none accepted: follows nothing
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  options = TestOptions();
  options.http = "bad";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvindex::router
