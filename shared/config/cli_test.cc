#include "shared/config/cli.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace kvindex::config {
namespace {

struct Args {
  explicit Args(std::vector<std::string> values) : storage(std::move(values)) {
    for (auto& value : storage) pointers.push_back(value.data());
  }
  int argc() { return static_cast<int>(pointers.size()); }
  char** argv() { return pointers.data(); }
  std::vector<std::string> storage;
  std::vector<char*> pointers;
};

struct Fixture {
  CLI::App app{"test app", "kvindex-test"};
  CommonOptions common;
  std::string data_dir;
  std::vector<std::string> sources;
  int threads = 1;
  Fixture() {
    AddCommonOptions(app, &common);
    app.add_option("--data-dir", data_dir);
    app.add_option("--source", sources);
    app.add_option("--http-threads", threads);
  }
};

TEST(CliTest, EnvironmentNames) {
  EXPECT_EQ(EnvironmentName("--data-dir"), "KVINDEX_DATA_DIR");
  EXPECT_EQ(EnvironmentName("nats"), "KVINDEX_NATS");
}

TEST(CliTest, CommandLineParses) {
  Fixture f;
  Args args({"kvindex-test", "--data-dir", "/tmp/x", "--source", "a", "--source", "b"});
  EXPECT_EQ(Parse(f.app, args.argc(), args.argv()), std::nullopt);
  EXPECT_EQ(f.data_dir, "/tmp/x");
  EXPECT_EQ(f.sources, (std::vector<std::string>{"a", "b"}));
}

TEST(CliTest, BadFlagIsExitTwo) {
  Fixture f;
  Args args({"kvindex-test", "--no-such-flag"});
  EXPECT_EQ(Parse(f.app, args.argc(), args.argv()), 2);
  Fixture g;
  Args bad_value({"kvindex-test", "--http-threads", "many"});
  EXPECT_EQ(Parse(g.app, bad_value.argc(), bad_value.argv()), 2);
}

TEST(CliTest, HelpAndVersionExitZero) {
  Fixture f;
  Args help({"kvindex-test", "--help"});
  EXPECT_EQ(Parse(f.app, help.argc(), help.argv()), 0);
  Fixture g;
  Args version({"kvindex-test", "--version"});
  EXPECT_EQ(Parse(g.app, version.argc(), version.argv()), 0);
}

TEST(CliTest, EnvironmentSetsFlagsAndCommandLineWins) {
  ::setenv("KVINDEX_DATA_DIR", "/from/env", 1);
  ::setenv("KVINDEX_HTTP_THREADS", "7", 1);
  Fixture f;
  Args args({"kvindex-test", "--http-threads", "3"});
  EXPECT_EQ(Parse(f.app, args.argc(), args.argv()), std::nullopt);
  EXPECT_EQ(f.data_dir, "/from/env");
  EXPECT_EQ(f.threads, 3);
  ::unsetenv("KVINDEX_DATA_DIR");
  ::unsetenv("KVINDEX_HTTP_THREADS");
}

TEST(CliTest, YamlConfigFile) {
  const auto path = std::filesystem::temp_directory_path() / "kvindex_cli_test.yaml";
  {
    std::ofstream out(path);
    out << "data_dir: /from/yaml\nhttp-threads: 5\nsource:\n  - one\n  - two\nlog_format: json\n";
  }
  Fixture f;
  Args args({"kvindex-test", "--config", path.string()});
  EXPECT_EQ(Parse(f.app, args.argc(), args.argv()), std::nullopt);
  EXPECT_EQ(f.data_dir, "/from/yaml");
  EXPECT_EQ(f.threads, 5);
  EXPECT_EQ(f.sources, (std::vector<std::string>{"one", "two"}));
  EXPECT_EQ(f.common.log_format, "json");
  std::filesystem::remove(path);
}

TEST(CliTest, BrokenYamlIsExitTwo) {
  const auto path = std::filesystem::temp_directory_path() / "kvindex_cli_bad.yaml";
  {
    std::ofstream out(path);
    out << "data_dir: [unclosed\n";
  }
  Fixture f;
  Args args({"kvindex-test", "--config", path.string()});
  EXPECT_EQ(Parse(f.app, args.argc(), args.argv()), 2);
  std::filesystem::remove(path);
}

TEST(CliTest, Durations) {
  EXPECT_EQ(*ParseDuration("10s"), std::chrono::milliseconds(10000));
  EXPECT_EQ(*ParseDuration("250ms"), std::chrono::milliseconds(250));
  EXPECT_EQ(*ParseDuration("2m"), std::chrono::milliseconds(120000));
  EXPECT_EQ(*ParseDuration("3"), std::chrono::milliseconds(3000));
  EXPECT_FALSE(ParseDuration("ten").ok());
  EXPECT_FALSE(ParseDuration("5y").ok());
}

}  // namespace
}  // namespace kvindex::config
