#include "shared/nats/flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>

namespace kvindex::nats {
namespace {

std::string WriteTemp(const std::string& text) {
  char path[] = "/tmp/kvindex-nats-flags-XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  std::ofstream(path) << text;
  return path;
}

TEST(FlagsTest, ParsesAndFinishes) {
  const std::string password_file = WriteTemp("  s3cret-pw  \nsecond line\n");
  CLI::App app;
  NatsOptions options;
  StreamOptions stream;
  StreamFlagText text;
  AddNatsFlags(app, &options);
  AddStreamFlags(app, &stream, &text);
  app.parse("--nats nats://127.0.0.1:4222 --nats-user agent --nats-password-file " + password_file +
                " --stream S1 --stream-prefix p.q --stream-replicas 3 --stream-max-age 2h "
                "--stream-max-bytes 1000000 --stream-duplicate-window 30s --stream-storage memory",
            false);
  ASSERT_TRUE(FinishNatsFlags(text, &options, &stream).ok());
  EXPECT_EQ(options.password, "s3cret-pw");
  EXPECT_EQ(stream.name, "S1");
  EXPECT_EQ(stream.subjects.prefix, "p.q");
  EXPECT_EQ(stream.replicas, 3);
  EXPECT_EQ(stream.max_age, std::chrono::hours(2));
  EXPECT_EQ(stream.max_bytes, 1000000);
  EXPECT_EQ(stream.duplicate_window, std::chrono::seconds(30));
  EXPECT_TRUE(stream.memory_storage);
  // Describe names the auth kind, never the password.
  EXPECT_EQ(options.Describe().find("s3cret"), std::string::npos);
  EXPECT_NE(options.Describe().find("auth=user/password"), std::string::npos);
  std::remove(password_file.c_str());
}

TEST(FlagsTest, NoFlagTakesASecret) {
  CLI::App app;
  NatsOptions options;
  AddNatsFlags(app, &options);
  for (const char* flag : {"--nats-password", "--nats-token", "--nats-nkey-seed"}) {
    EXPECT_THROW(app.get_option(flag), CLI::OptionNotFound) << flag;
  }
}

TEST(FlagsTest, BadValuesNameTheFlag) {
  NatsOptions options;
  options.url = "nats://127.0.0.1:1";
  StreamOptions stream;
  StreamFlagText text;
  text.max_age = "soon";
  Status status = FinishNatsFlags(text, &options, &stream);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_NE(status.message().find("--stream-max-age"), std::string::npos) << status;

  text = StreamFlagText();
  stream.subjects.prefix = "a.*";
  status = FinishNatsFlags(text, &options, &stream);
  EXPECT_NE(status.message().find("--stream-prefix"), std::string::npos) << status;

  stream = StreamOptions();
  options.tls_cert_file = "/etc/hostname";
  status = FinishNatsFlags(text, &options, &stream);
  EXPECT_NE(status.message().find("--nats-tls-cert"), std::string::npos) << status;

  options = NatsOptions();
  status = FinishNatsFlags(text, &options, &stream);
  EXPECT_NE(status.message().find("--nats"), std::string::npos) << status;

  options.url = "nats://127.0.0.1:1";
  options.tls_ca_file = "/nonexistent/ca.pem";
  status = FinishNatsFlags(text, &options, &stream);
  EXPECT_NE(status.message().find("--nats-tls-ca"), std::string::npos) << status;
}

TEST(FlagsTest, CredentialsInTheUrlAreRefused) {
  StreamFlagText text;
  StreamOptions stream;
  for (const char* url :
       {"nats://agent:hunter2@127.0.0.1:4222", "nats://s3cret-token@127.0.0.1:4222",
        "nats://127.0.0.1:4222, nats://u:p@127.0.0.2:4222"}) {
    NatsOptions options;
    options.url = url;
    const Status status = FinishNatsFlags(text, &options, &stream);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << url;
    EXPECT_NE(status.message().find("--nats-password-file"), std::string::npos) << status;
    EXPECT_NE(status.message().find("KVINDEX_NATS_TOKEN"), std::string::npos) << status;
    EXPECT_EQ(status.message().find("hunter2"), std::string::npos) << status;
  }
}

TEST(FlagsTest, DescribeRedactsAPasswordHoldingAt) {
  NatsOptions options;
  options.url = "nats://agent:hunter2@tail-of-secret@127.0.0.1:4222";
  const std::string described = options.Describe();
  EXPECT_EQ(described.find("tail-of-secret"), std::string::npos) << described;
  EXPECT_EQ(described.find("hunter2"), std::string::npos) << described;
  EXPECT_NE(described.find("***@127.0.0.1:4222"), std::string::npos) << described;
}

TEST(FlagsTest, SecretsFromEnvironmentAndRedactedUrls) {
  setenv("KVINDEX_NATS_TOKEN", "tok-env-123", 1);
  NatsOptions options;
  options.url = "nats://user:hunter2@127.0.0.1:4222, tls://10.0.0.2:4222";
  ASSERT_TRUE(LoadSecrets(&options).ok());
  unsetenv("KVINDEX_NATS_TOKEN");
  EXPECT_EQ(options.token, "tok-env-123");
  const std::string described = options.Describe();
  EXPECT_EQ(described.find("hunter2"), std::string::npos) << described;
  EXPECT_EQ(described.find("tok-env"), std::string::npos) << described;
  EXPECT_NE(described.find("tls=on"), std::string::npos) << described;
  EXPECT_NE(described.find("auth=token"), std::string::npos) << described;
}

}  // namespace
}  // namespace kvindex::nats
