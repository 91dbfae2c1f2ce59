#include "shared/config/cli.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
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

// The text ReportCheckedConfig writes for `environment`, and its exit code.
std::pair<int, std::string> Report(const CLI::App& app, const CheckConfigOptions& options,
                                   std::vector<std::string> environment) {
  std::vector<char*> entries;
  for (auto& entry : environment) entries.push_back(entry.data());
  entries.push_back(nullptr);
  std::FILE* out = std::tmpfile();
  const int code = ReportCheckedConfig(app, options, out, entries.data());
  std::rewind(out);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), out)) > 0;) text.append(buffer, n);
  std::fclose(out);
  return {code, text};
}

TEST(CliTest, CheckConfigPrintsEffectiveValuesAndMasksSecrets) {
  ::setenv("KVINDEX_DATA_DIR", "/from/env", 1);
  Fixture f;
  bool check = false;
  bool flag = false;
  std::string token;
  std::string url;
  AddCheckConfigFlag(f.app, &check);
  f.app.add_flag("--metrics-auth", flag);
  f.app.add_option("--auth-token", token);
  f.app.add_option("--nats", url);
  Args args({"kvindex-test", "--check-config", "--source", "a", "--source", "b", "--auth-token",
             "s3cret-value", "--nats", "nats://user:pa55@h1:4222,nats://h2:4222",
             "--metrics-auth"});
  ASSERT_EQ(Parse(f.app, args.argc(), args.argv()), std::nullopt);
  ::unsetenv("KVINDEX_DATA_DIR");
  EXPECT_TRUE(check);
  auto [code, text] =
      Report(f.app, {{"auth-token"}, {"KVINDEX_NATS_PASSWORD"}},
             {"KVINDEX_DATA_DIR=/from/env", "KVINDEX_NATS_PASSWORD=hunter2", "PATH=/bin"});
  EXPECT_EQ(code, 0);
  EXPECT_NE(text.find("data_dir: \"/from/env\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("source:\n  - \"a\"\n  - \"b\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("http_threads: \"\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("metrics_auth: true\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# auth_token: set (masked)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("nats: \"nats://***@h1:4222,nats://h2:4222\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# environment KVINDEX_NATS_PASSWORD: set (masked)"), std::string::npos);
  EXPECT_EQ(text.find("s3cret"), std::string::npos) << text;
  EXPECT_EQ(text.find("pa55"), std::string::npos) << text;
  EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  EXPECT_EQ(text.find("check_config"), std::string::npos) << text;
}

TEST(CliTest, CheckConfigRefusesUnknownEnvironment) {
  Fixture f;
  Args args({"kvindex-test"});
  ASSERT_EQ(Parse(f.app, args.argc(), args.argv()), std::nullopt);
  EXPECT_EQ(UnknownEnvironment(f.app, {"KVINDEX_NATS_TOKEN"}, std::vector<char*>{nullptr}.data()),
            std::vector<std::string>{});
  std::string typo = "KVINDEX_DATA_DIRR=/x";
  std::string known = "KVINDEX_HTTP_THREADS=3";
  std::string allowed = "KVINDEX_NATS_TOKEN=t";
  std::string other = "HOME=/root";
  std::vector<char*> environment{typo.data(), known.data(), allowed.data(), other.data(), nullptr};
  EXPECT_EQ(UnknownEnvironment(f.app, {"KVINDEX_NATS_TOKEN"}, environment.data()),
            std::vector<std::string>{"KVINDEX_DATA_DIRR"});
  EXPECT_EQ(Report(f.app, {{}, {"KVINDEX_NATS_TOKEN"}},
                   {"KVINDEX_DATA_DIRR=/x", "KVINDEX_HTTP_THREADS=3"})
                .first,
            2);
}

TEST(CliTest, RedactUrlCredentials) {
  EXPECT_EQ(RedactUrlCredentials("nats://h:4222"), "nats://h:4222");
  EXPECT_EQ(RedactUrlCredentials("tls://u:p@h:4222/x"), "tls://***@h:4222/x");
  EXPECT_EQ(RedactUrlCredentials("a,nats://tok@h"), "a,nats://***@h");
  EXPECT_EQ(RedactUrlCredentials("plain"), "plain");
  EXPECT_EQ(RedactUrlCredentials(""), "");
  // A password holding '@' or '/' (unencoded): nothing of it is left.
  EXPECT_EQ(RedactUrlCredentials("nats://agent:pa@ss-tail@h:4222"), "nats://***@h:4222");
  EXPECT_EQ(RedactUrlCredentials("nats://agent:pa/ss@h:4222,nats://x:y@@z"),
            "nats://***@h:4222,nats://***@z");
}

TEST(CliTest, SecretsOnTheCommandLineAreRefused) {
  const std::vector<SecretFlag> secrets = {{"--auth-token", "--auth-token-file or KVINDEX_X"}};
  Args spaced({"kvindex-test", "--data-dir", "d", "--auth-token", "s3cret"});
  Status status = RefuseSecretsOnCommandLine(spaced.argc(), spaced.argv(), secrets);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--auth-token-file or KVINDEX_X"), std::string::npos) << status;
  EXPECT_EQ(status.message().find("s3cret"), std::string::npos) << status;
  Args joined({"kvindex-test", "--auth-token=s3cret"});
  EXPECT_FALSE(RefuseSecretsOnCommandLine(joined.argc(), joined.argv(), secrets).ok());
  // The file flag, and values that merely contain the name, are fine.
  Args file({"kvindex-test", "--auth-token-file", "/run/token", "--data-dir", "--auth-token"});
  EXPECT_TRUE(RefuseSecretsOnCommandLine(3, file.argv(), secrets).ok());
}

}  // namespace
}  // namespace kvindex::config
