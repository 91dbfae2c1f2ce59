#include "services/router/embedded/registered_engines.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

namespace kvindex::router {
namespace {

using query::EngineRegistration;

class RegisteredEnginesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvindex-registered-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RegisteredEnginesOptions Options(uint32_t max_registrations) {
    RegisteredEnginesOptions options;
    options.base.node = "n";
    options.base.replay_timeout = std::chrono::milliseconds(50);
    options.max_registrations = max_registrations;
    options.state_file = (dir_ / "registrations.json").string();
    options.retry_interval = std::chrono::milliseconds(20);
    options.model_block_size = [this](const std::string&) -> std::optional<uint32_t> {
      const uint32_t size = block_size_.load();
      if (size == 0) return std::nullopt;
      return size;
    };
    return options;
  }

  // Nothing listens there: ZMQ connects lazily, the pipeline runs.
  static EngineRegistration Registration(const std::string& instance, int port) {
    EngineRegistration r;
    r.endpoint = "tcp://127.0.0.1:" + std::to_string(port);
    r.type = "vLLM";
    r.model = "m";
    r.tenant_id = "default";
    r.instance_id = instance;
    r.block_size = 4;
    return r;
  }

  static bool WaitFor(const std::function<bool()>& done) {
    for (int i = 0; i < 500; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }

  // Registers "a" (tcp://127.0.0.1:1) and "b" (:2), saved, then stopped.
  void SaveTwo() {
    RegisteredEngines first(Options(2), &sink_, nullptr);
    ASSERT_TRUE(first.Start().ok());
    bool created = false;
    ASSERT_TRUE(first.Register(Registration("a", 1), &created).ok());
    ASSERT_TRUE(first.Register(Registration("b", 2), &created).ok());
    first.Stop();
  }

  std::vector<PlacementEvent> DrainAll() {
    std::vector<PlacementEvent> events;
    while (sink_.Drain(&events, 1 << 16, std::chrono::milliseconds(0)) > 0) {
    }
    return events;
  }

  std::filesystem::path dir_;
  std::atomic<uint32_t> block_size_{0};
  InProcessSink sink_;
};

// Two registrations saved; at the next start neither can run (a second
// router start with --max-registrations 1, and the model's block size in the
// index differs for a while): both stay in the file, marked pending, listed,
// retried; they run once they can, and nothing was lost.
TEST_F(RegisteredEnginesTest, SavedEntriesThatCannotStartAreKeptAndRetried) {
  ASSERT_NO_FATAL_FAILURE(SaveTwo());
  {
    block_size_ = 8;  // every saved entry refused for now
    RegisteredEngines second(Options(1), &sink_, nullptr);
    ASSERT_TRUE(second.Start().ok());
    EXPECT_EQ(second.size(), 0u);
    EXPECT_EQ(second.SavedInstances(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(second.Registered().size(), 2u);  // /workers still lists them
    EXPECT_TRUE(second.Follows("a"));
    EXPECT_TRUE(second.Ready());  // a pending registration does not hold /readyz
    block_size_ = 4;              // refusal gone: the retry starts one (the cap is 1)
    ASSERT_TRUE(WaitFor([&] { return second.size() == 1; }));
    EXPECT_EQ(second.SavedInstances(), (std::vector<std::string>{"a", "b"}));
    // Unregistering the running one makes room for the pending one.
    std::vector<std::string> removed;
    ASSERT_TRUE(second.Unregister(second.Sources().at(0).worker, std::nullopt, &removed).ok());
    ASSERT_TRUE(WaitFor([&] { return second.size() == 1; }));
    EXPECT_EQ(second.SavedInstances().size(), 1u);
    second.Stop();
  }
}

// A pending registration is unregistered like a running one (gone from the
// file), and registering its fields again tries it at once.
TEST_F(RegisteredEnginesTest, PendingEntriesUnregisterAndRegisterAgain) {
  ASSERT_NO_FATAL_FAILURE(SaveTwo());
  block_size_ = 8;
  RegisteredEnginesOptions options = Options(4);
  options.retry_interval = std::chrono::hours(1);
  RegisteredEngines second(options, &sink_, nullptr);
  ASSERT_TRUE(second.Start().ok());
  ASSERT_EQ(second.size(), 0u);
  std::vector<std::string> removed;
  ASSERT_TRUE(second.Unregister("a", std::nullopt, &removed).ok());
  EXPECT_EQ(removed.size(), 1u);
  EXPECT_EQ(second.SavedInstances(), (std::vector<std::string>{"b"}));
  EXPECT_FALSE(second.Follows("a"));
  bool created = false;
  EXPECT_FALSE(second.Register(Registration("b", 2), &created).ok());  // still refused
  EXPECT_EQ(second.Register(Registration("b", 3), &created).code(),
            absl::StatusCode::kAlreadyExists);  // other fields under a taken instance
  block_size_ = 4;
  ASSERT_TRUE(second.Register(Registration("b", 2), &created).ok());
  EXPECT_EQ(second.size(), 1u);
  EXPECT_EQ(second.SavedInstances(), (std::vector<std::string>{"b"}));
  second.Stop();
}

// A saved instance that a --source now follows stays pending, and its
// "cleared" is not published: the entries are the --source's now.
TEST_F(RegisteredEnginesTest, PendingInstanceOfASourceIsNotCleared) {
  ASSERT_NO_FATAL_FAILURE(SaveTwo());
  DrainAll();
  RegisteredEnginesOptions options = Options(4);
  auto specs =
      ingest::ParseSourceSpec("worker=a,engine=vllm,model=m,block_size=4,pub=tcp://127.0.0.1:9");
  ASSERT_TRUE(specs.ok()) << specs.status();
  options.configured = *specs;
  RegisteredEngines second(options, &sink_, nullptr);
  ASSERT_TRUE(second.Start().ok());
  EXPECT_EQ(second.size(), 1u);  // b runs, a is pending
  EXPECT_EQ(second.SavedInstances(), (std::vector<std::string>{"a", "b"}));
  for (const PlacementEvent& e : DrainAll()) EXPECT_NE(e.source.worker, "a") << e.agent;
  second.Stop();
}

// The reverse of the bridge's check: an instance named like a worker the
// SGLang bridge feeds is refused (its "cleared" would wipe that worker).
TEST_F(RegisteredEnginesTest, BridgeWorkerNamesAreRefused) {
  RegisteredEngines engines(Options(4), &sink_, nullptr);
  engines.SetBridgeWorkers([](const std::string& worker) { return worker == "sg0"; });
  ASSERT_TRUE(engines.Start().ok());
  bool created = false;
  const Status refused = engines.Register(Registration("sg0", 1), &created);
  EXPECT_EQ(refused.code(), absl::StatusCode::kAlreadyExists) << refused;
  EXPECT_NE(refused.message().find("SGLang bridge"), std::string::npos) << refused;
  EXPECT_FALSE(created);
  EXPECT_TRUE(engines.Register(Registration("sg1", 1), &created).ok());
  engines.SetBridgeWorkers(nullptr);
  engines.Stop();
}

}  // namespace
}  // namespace kvindex::router
