// Integration tests of Connection against a real nats-server: round trips,
// background initial connect, auth (user/password, token, NKey), TLS with
// client certificates, metrics, and that no secret reaches the logs.
#include "shared/nats/connection.h"

#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>
#include <spdlog/sinks/ostream_sink.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "shared/base/strings.h"
#include "shared/log/log.h"
#include "shared/nats/internal/nkey.h"
#include "shared/nats/testing/jwt.h"
#include "shared/nats/testing/nats_server.h"

namespace kvindex::nats {
namespace {

using std::chrono::milliseconds;
using testing::NatsServerOptions;
using testing::NatsServerProcess;

template <typename Predicate>
bool WaitFor(Predicate predicate, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return predicate();
}

// The value of metric `name` with label role=`role`, -1 when absent.
double MetricValue(prometheus::Registry& registry, const std::string& name,
                   const std::string& role) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "role" && label.value == role) {
          return family.type == prometheus::MetricType::Counter ? metric.counter.value
                                                                : metric.gauge.value;
        }
      }
    }
  }
  return -1;
}

// Captures everything the "nats" logger writes during a test.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_)) {
    log::Get("nats")->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = log::Get("nats")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() {
    log::Get("nats")->flush();
    return stream_.str();
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ConnectionTest, PublishSubscribeRoundTrip) {
  auto server = NatsServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.name = "round-trip";
  std::atomic<int> connected_hooks{0};
  Connection::Hooks hooks;
  hooks.on_connected = [&] { connected_hooks++; };
  auto connection = Connection::Connect(options, &registry, "agent", hooks, false);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_TRUE((*connection)->connected());
  EXPECT_EQ(connected_hooks.load(), 1);
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "agent"), 1);

  natsSubscription* sub = nullptr;
  ASSERT_EQ(natsConnection_SubscribeSync(&sub, (*connection)->raw(), "kvindex.events.>"), NATS_OK);
  ASSERT_EQ(natsConnection_Flush((*connection)->raw()), NATS_OK);
  ASSERT_EQ(natsConnection_PublishString((*connection)->raw(), "kvindex.events.m.n", "hello"),
            NATS_OK);
  natsMsg* msg = nullptr;
  ASSERT_EQ(natsSubscription_NextMsg(&msg, sub, 5000), NATS_OK);
  EXPECT_EQ(std::string(natsMsg_GetData(msg), natsMsg_GetDataLength(msg)), "hello");
  EXPECT_STREQ(natsMsg_GetSubject(msg), "kvindex.events.m.n");
  natsMsg_Destroy(msg);
  natsSubscription_Destroy(sub);
}

TEST(ConnectionTest, UnreachableServerWithoutRetryIsUnavailable) {
  NatsOptions options;
  options.url = strings::Cat("nats://127.0.0.1:", testing::FreePort());
  options.connect_timeout = milliseconds(500);
  auto connection = Connection::Connect(options, nullptr, "agent", {}, false);
  EXPECT_TRUE(absl::IsUnavailable(connection.status())) << connection.status();
}

TEST(ConnectionTest, RetryInitialConnectsWhenServerComesUpLater) {
  auto server = NatsServerProcess::Prepare({});
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.connect_timeout = milliseconds(500);
  std::atomic<int> connected{0}, disconnected{0}, reconnected{0};
  Connection::Hooks hooks;
  hooks.on_connected = [&] { connected++; };
  hooks.on_disconnected = [&] { disconnected++; };
  hooks.on_reconnected = [&] { reconnected++; };
  auto connection = Connection::Connect(options, &registry, "router", hooks, true);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_FALSE((*connection)->connected());
  EXPECT_EQ(connected.load(), 0);
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "router"), 0);

  std::this_thread::sleep_for(milliseconds(1000));
  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return (*connection)->connected() && connected.load() == 1; }));
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "router"), 1);

  // A server restart: disconnect then reconnect hooks and counters.
  (*server)->Kill();
  ASSERT_TRUE(WaitFor([&] { return disconnected.load() >= 1; }));
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "router"), 0);
  ASSERT_TRUE((*server)->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return reconnected.load() >= 1 && (*connection)->connected(); }));
  EXPECT_GE(MetricValue(registry, "kvindex_nats_disconnects_total", "router"), 1);
  EXPECT_GE(MetricValue(registry, "kvindex_nats_reconnects_total", "router"), 1);
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "router"), 1);
}

std::string PasswordConfig(const std::string& password) {
  return "authorization { user: \"agent\", password: \"" + password + "\" }";
}

// A nats-server requiring user "agent" with `password`.
StatusOr<std::unique_ptr<NatsServerProcess>> StartWithPassword(const std::string& password) {
  NatsServerOptions server_options;
  server_options.config = PasswordConfig(password);
  return NatsServerProcess::Start(server_options);
}

TEST(ConnectionTest, UserPasswordAuth) {
  auto server = StartWithPassword("pw-Secret-42");
  ASSERT_TRUE(server.ok()) << server.status();
  LogCapture logs;
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();

  for (bool retry : {false, true}) {
    SCOPED_TRACE(retry ? "retry_initial" : "no retry");
    auto none = Connection::Connect(options, &registry, "agent", {}, retry);
    EXPECT_TRUE(absl::IsPermissionDenied(none.status())) << none.status();
  }
  options.user = "agent";
  options.password_file = WriteFile((*server)->dir(), "wrong", "pw-Wrong-17\n");
  ASSERT_TRUE(LoadSecrets(&options).ok());
  auto wrong = Connection::Connect(options, &registry, "agent", {}, false);
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.status())) << wrong.status();
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failures_total", "agent"), 3);

  options.password_file = WriteFile((*server)->dir(), "right", "pw-Secret-42\n");
  ASSERT_TRUE(LoadSecrets(&options).ok());
  auto right = Connection::Connect(options, &registry, "agent", {}, false);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE((*right)->connected());

  const std::string text = logs.text();
  EXPECT_NE(text.find("auth"), std::string::npos) << text;  // the capture works
  for (const char* secret : {"pw-Secret-42", "pw-Wrong-17"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << text;
    EXPECT_EQ(std::string(wrong.status().message()).find(secret), std::string::npos);
  }
}

// A nats-server requiring `token`.
StatusOr<std::unique_ptr<NatsServerProcess>> StartWithToken(const std::string& token) {
  NatsServerOptions server_options;
  server_options.config = "authorization { token: \"" + token + "\" }";
  return NatsServerProcess::Start(server_options);
}

// Restarts `server` (same port) requiring `token` instead.
Status RestartWithToken(NatsServerProcess& server, const std::string& token) {
  server.Kill();
  std::ofstream(server.dir() + "/server.conf") << "authorization { token: \"" << token << "\" }";
  return server.Restart();
}

TEST(ConnectionTest, AuthFailureDuringReconnectIsCounted) {
  auto server = StartWithToken("tok-One-1");
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.token = "tok-One-1";
  std::atomic<int> closed_hook{0};
  Connection::Hooks hooks;
  hooks.on_closed = [&] { closed_hook++; };
  auto connection = Connection::Connect(options, &registry, "router", hooks, false);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failures_total", "router"), 0);

  // The server comes back with another token: every reconnect attempt fails auth.
  ASSERT_TRUE(RestartWithToken(**server, "tok-Two-2").ok());
  EXPECT_TRUE(WaitFor([&] { return (*connection)->auth_failures() >= 1; }));
  EXPECT_GE(MetricValue(registry, "kvindex_nats_auth_failures_total", "router"), 1);
  EXPECT_FALSE((*connection)->connected());
  // cnats gives up after the same auth error twice in a row; the owner hears it.
  EXPECT_TRUE(WaitFor([&] { return closed_hook.load() == 1 && (*connection)->closed(); }));
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failures_total", "router"),
            static_cast<double>((*connection)->auth_failures()));
}

// Reproduction (issue #21): a credential rotated in the wrong order (the
// server first) closed every connection for good, and agents and routers
// exited 1. A token file is read again at every reconnect: once the file
// holds the new token the connection comes back by itself, never closed.
TEST(ConnectionTest, TokenFileIsReadAgainOnReconnect) {
  auto server = StartWithToken("tok-One-1");
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.token_file = WriteFile((*server)->dir(), "token", "tok-One-1\n");
  ASSERT_TRUE(LoadSecrets(&options).ok());
  std::atomic<int> closed_hook{0};
  Connection::Hooks hooks;
  hooks.on_closed = [&] { closed_hook++; };
  auto connection = Connection::Connect(options, &registry, "agent", hooks, false);
  ASSERT_TRUE(connection.ok()) << connection.status();

  // The Secret is updated (the file first), then the server: the reconnect
  // reads the new token.
  WriteFile((*server)->dir(), "token", "tok-Two-2\n");
  ASSERT_TRUE(RestartWithToken(**server, "tok-Two-2").ok());
  // (The client may not have noticed the restart yet: wait for the
  // reconnect itself, not only for "connected".)
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue(registry, "kvindex_nats_reconnects_total", "agent") >= 1 &&
           (*connection)->connected();
  }));
  EXPECT_EQ(closed_hook.load(), 0);
  EXPECT_FALSE((*connection)->closed());
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_reconnects_total", "agent"), 1);
}

// One round trip to the server on the connection's current handle.
bool RoundTrip(const Connection& connection) {
  return connection.connected() && natsConnection_FlushTimeout(connection.raw(), 2000) == NATS_OK;
}

// Issue #21: a password can only be rotated with a restart (cnats takes it
// once). With keep_trying_auth, the file rewritten first and the server's
// config reloaded second: the server drops the connection, cnats is refused
// twice with the old password and closes it, and a new connection is dialled
// with the file read again. Nothing exits; the handles change generation.
TEST(ConnectionTest, PasswordRotatedInItsFileNeedsNoRestart) {
  auto server = StartWithPassword("pw-One-1");
  ASSERT_TRUE(server.ok()) << server.status();
  LogCapture logs;
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.user = "agent";
  options.password_file = WriteFile((*server)->dir(), "password", "pw-One-1\n");
  options.keep_trying_auth = true;
  ASSERT_TRUE(LoadSecrets(&options).ok());
  auto connection = Connection::Connect(options, &registry, "agent", {}, true);
  ASSERT_TRUE(connection.ok()) << connection.status();
  ASSERT_TRUE(RoundTrip(**connection));
  EXPECT_EQ((*connection)->generation(), 1u);

  WriteFile((*server)->dir(), "password", "pw-Two-2\n");
  ASSERT_TRUE((*server)->Reload(PasswordConfig("pw-Two-2")).ok());
  EXPECT_TRUE(WaitFor([&] { return (*connection)->generation() >= 2 && RoundTrip(**connection); }));
  EXPECT_GE(MetricValue(registry, "kvindex_nats_redials_total", "agent"), 1);
  EXPECT_GE(MetricValue(registry, "kvindex_nats_auth_failures_total", "agent"), 1);
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failing", "agent"), 0);
  EXPECT_FALSE((*connection)->auth_failing());
  const std::string text = logs.text();
  for (const char* secret : {"pw-One-1", "pw-Two-2"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << text;
  }
}

// The server is rotated first: the process keeps running, refused, not
// connected and flagged auth_failing (readiness), until the file holds the
// new password.
TEST(ConnectionTest, RefusedCredentialsAreRetriedUntilTheFileIsFixed) {
  auto server = StartWithPassword("pw-One-1");
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.user = "agent";
  options.password_file = WriteFile((*server)->dir(), "password", "pw-Wrong-0\n");
  options.keep_trying_auth = true;
  options.reconnect_wait_max = milliseconds(300);
  ASSERT_TRUE(LoadSecrets(&options).ok());
  // Refused at the first connect: still a Connection, not connected.
  auto connection = Connection::Connect(options, &registry, "router", {}, true);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_FALSE((*connection)->connected());
  EXPECT_TRUE((*connection)->auth_failing());
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failing", "router"), 1);
  // It keeps being refused (and counted) while the file is wrong.
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue(registry, "kvindex_nats_redials_total", "router") >= 2 &&
           MetricValue(registry, "kvindex_nats_auth_failures_total", "router") >= 3;
  }));
  EXPECT_FALSE((*connection)->connected());
  EXPECT_TRUE((*connection)->auth_failing());

  WriteFile((*server)->dir(), "password", "pw-One-1\n");
  EXPECT_TRUE(WaitFor([&] { return RoundTrip(**connection); }));
  EXPECT_FALSE((*connection)->auth_failing());
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failing", "router"), 0);
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_connected", "router"), 1);
}

// An NKey seed file rotated (a new key pair: the public key changes), then
// the server's users list reloaded.
TEST(ConnectionTest, NkeySeedRotatedInItsFileNeedsNoRestart) {
  std::mt19937 random(std::random_device{}());
  auto make_seed = [&random] {
    std::array<uint8_t, 32> raw{};
    for (auto& b : raw) b = static_cast<uint8_t>(random());
    return internal::EncodeUserSeed(raw);
  };
  auto config = [](const std::string& seed) {
    return strings::Cat(R"(authorization { users: [ { nkey: ")", *internal::PublicKeyFromSeed(seed),
                        R"(" } ] })");
  };
  const std::string first = make_seed();
  const std::string second = make_seed();
  NatsServerOptions server_options;
  server_options.config = config(first);
  auto server = NatsServerProcess::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  options.nkey_seed_file = WriteFile((*server)->dir(), "user.nk", first + "\n");
  options.keep_trying_auth = true;
  auto connection = Connection::Connect(options, &registry, "agent", {}, true);
  ASSERT_TRUE(connection.ok()) << connection.status();
  ASSERT_TRUE(RoundTrip(**connection));

  WriteFile((*server)->dir(), "user.nk", second + "\n");
  ASSERT_TRUE((*server)->Reload(config(second)).ok());
  EXPECT_TRUE(WaitFor([&] { return (*connection)->generation() >= 2 && RoundTrip(**connection); }));
  EXPECT_GE(MetricValue(registry, "kvindex_nats_redials_total", "agent"), 1);
}

// Operator mode (JWTs, issue #21): the user's .creds file is replaced by
// another user's of the same account, then the server's account revokes the
// first user (config reload). The server drops the connection; the redial
// reads the file again and signs in as the new user. No restart.
TEST(ConnectionTest, CredsFileRotatedNeedsNoRestart) {
  const auto op = testing::Identity::New('O');
  const auto system = testing::Identity::New('A');
  const auto account = testing::Identity::New('A');
  const auto first = testing::Identity::New('U');
  const auto second = testing::Identity::New('U');
  NatsServerOptions server_options;
  server_options.config = testing::OperatorModeConfig(op, system, account, {});
  auto server = NatsServerProcess::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  LogCapture logs;
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  const std::string first_creds = testing::CredsFile(account, first);
  options.creds_file = WriteFile((*server)->dir(), "user.creds", first_creds);
  options.keep_trying_auth = true;
  auto connection = Connection::Connect(options, &registry, "agent", {}, true);
  ASSERT_TRUE(connection.ok()) << connection.status();
  ASSERT_TRUE(RoundTrip(**connection));
  EXPECT_EQ((*connection)->generation(), 1u);

  WriteFile((*server)->dir(), "user.creds", testing::CredsFile(account, second));
  ASSERT_TRUE(
      (*server)->Reload(testing::OperatorModeConfig(op, system, account, {first.public_key})).ok());
  EXPECT_TRUE(WaitFor([&] { return (*connection)->generation() >= 2 && RoundTrip(**connection); }));
  EXPECT_GE(MetricValue(registry, "kvindex_nats_redials_total", "agent"), 1);
  EXPECT_FALSE((*connection)->auth_failing());
  // The first user is refused now: the rotation really took the new creds.
  NatsOptions old_user = options;
  old_user.creds_file = WriteFile((*server)->dir(), "old.creds", first_creds);
  old_user.keep_trying_auth = false;
  auto refused = Connection::Connect(old_user, nullptr, "agent", {}, false);
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();
  const std::string text = logs.text();
  for (const std::string& seed : {first.seed, second.seed}) {
    EXPECT_EQ(text.find(seed), std::string::npos) << text;
  }
}

TEST(ConnectionTest, TokenAuth) {
  NatsServerOptions server_options;
  server_options.config = R"(authorization { token: "tok-Secret-99" })";
  auto server = NatsServerProcess::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  LogCapture logs;
  prometheus::Registry registry;
  NatsOptions options;
  options.url = (*server)->url();
  auto none = Connection::Connect(options, &registry, "agent", {}, false);
  EXPECT_TRUE(absl::IsPermissionDenied(none.status())) << none.status();

  setenv("KVINDEX_NATS_TOKEN", "tok-Wrong-00", 1);
  ASSERT_TRUE(LoadSecrets(&options).ok());
  unsetenv("KVINDEX_NATS_TOKEN");
  auto wrong = Connection::Connect(options, &registry, "agent", {}, true);
  EXPECT_TRUE(absl::IsPermissionDenied(wrong.status())) << wrong.status();
  EXPECT_EQ(MetricValue(registry, "kvindex_nats_auth_failures_total", "agent"), 2);

  options.token.clear();
  options.token_file = WriteFile((*server)->dir(), "token", "tok-Secret-99\n");
  ASSERT_TRUE(LoadSecrets(&options).ok());
  auto right = Connection::Connect(options, &registry, "agent", {}, false);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_TRUE((*right)->connected());
  EXPECT_EQ(options.Describe().find("tok-"), std::string::npos);
  const std::string text = logs.text();
  EXPECT_EQ(text.find("tok-Secret-99"), std::string::npos) << text;
  EXPECT_EQ(text.find("tok-Wrong-00"), std::string::npos) << text;
}

TEST(ConnectionTest, NkeySeedAuth) {
  std::array<uint8_t, 32> raw{};
  std::mt19937 random(std::random_device{}());
  for (auto& b : raw) b = static_cast<uint8_t>(random());
  const std::string seed = internal::EncodeUserSeed(raw);
  auto public_key = internal::PublicKeyFromSeed(seed);
  ASSERT_TRUE(public_key.ok()) << public_key.status();
  NatsServerOptions server_options;
  server_options.config =
      strings::Cat(R"(authorization { users: [ { nkey: ")", *public_key, R"(" } ] })");
  auto server = NatsServerProcess::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  LogCapture logs;
  NatsOptions options;
  options.url = (*server)->url();
  options.nkey_seed_file = WriteFile((*server)->dir(), "user.nk", seed + "\n");
  auto connection = Connection::Connect(options, nullptr, "agent", {}, false);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_TRUE((*connection)->connected());

  // Another seed is refused.
  raw[0] ^= 1;
  options.nkey_seed_file = WriteFile((*server)->dir(), "other.nk", internal::EncodeUserSeed(raw));
  auto other = Connection::Connect(options, nullptr, "agent", {}, false);
  EXPECT_TRUE(absl::IsPermissionDenied(other.status())) << other.status();
  EXPECT_EQ(logs.text().find(seed), std::string::npos);
}

// Makes a CA, a server certificate for IP 127.0.0.1 and a client
// certificate in `dir` with the openssl CLI.
bool MakeCertificates(const std::string& dir) {
  const std::string script = R"(set -e
exec >openssl.log 2>&1
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=kvindex-test-ca \
  -keyout ca.key -out ca.pem
printf 'subjectAltName=IP:127.0.0.1\n' > server.ext
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.pem
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl req -newkey rsa:2048 -nodes -subj /CN=kvindex-agent -keyout client.key -out client.csr
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile client.ext -out client.pem
)";
  WriteFile(dir, "certs.sh", script);
  return std::system(strings::Cat("cd ", dir, " && bash certs.sh").c_str()) == 0;
}

TEST(ConnectionTest, TlsWithClientCertificates) {
  auto server_dir = NatsServerProcess::Prepare({});  // only for a temp dir that gets cleaned up
  ASSERT_TRUE(server_dir.ok());
  const std::string dir = (*server_dir)->dir();
  if (!MakeCertificates(dir)) {
    std::ifstream log(dir + "/openssl.log");
    FAIL() << "openssl failed: " << std::string(std::istreambuf_iterator<char>(log), {});
  }
  NatsServerOptions server_options;
  server_options.config =
      strings::Cat("tls { cert_file: \"", dir, "/server.pem\", key_file: \"", dir,
                   "/server.key\", ca_file: \"", dir, "/ca.pem\", verify: true, timeout: 2 }");
  auto server = NatsServerProcess::Start(server_options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string url = strings::Cat("tls://127.0.0.1:", (*server)->port());

  NatsOptions options;
  options.url = url;
  options.tls_ca_file = dir + "/ca.pem";
  options.tls_cert_file = dir + "/client.pem";
  options.tls_key_file = dir + "/client.key";
  ASSERT_TRUE(options.Validate().ok());
  EXPECT_NE(options.Describe().find("tls=on"), std::string::npos);
  auto connection = Connection::Connect(options, nullptr, "agent", {}, false);
  ASSERT_TRUE(connection.ok()) << connection.status();
  EXPECT_TRUE((*connection)->connected());
  ASSERT_EQ(natsConnection_PublishString((*connection)->raw(), "a", "b"), NATS_OK);
  ASSERT_EQ(natsConnection_Flush((*connection)->raw()), NATS_OK);

  // Without the client certificate the server refuses the handshake.
  NatsOptions no_cert = options;
  no_cert.tls_cert_file.clear();
  no_cert.tls_key_file.clear();
  no_cert.connect_timeout = milliseconds(1000);
  auto refused = Connection::Connect(no_cert, nullptr, "agent", {}, false);
  EXPECT_TRUE(absl::IsPermissionDenied(refused.status())) << refused.status();

  // Plain TCP to a TLS server is refused too.
  NatsOptions plain;
  plain.url = (*server)->url();
  plain.connect_timeout = milliseconds(1000);
  auto plain_refused = Connection::Connect(plain, nullptr, "agent", {}, false);
  // (cnats upgrades to TLS as the server demands, then cannot verify it.)
  EXPECT_TRUE(absl::IsFailedPrecondition(plain_refused.status())) << plain_refused.status();
}

TEST(ConnectionTest, ValidateNamesTheFlag) {
  NatsOptions options;
  EXPECT_NE(options.Validate().message().find("--nats"), std::string::npos);
  options.url = "nats://127.0.0.1:4222";
  EXPECT_TRUE(options.Validate().ok());
  options.tls_key_file = "/etc/hostname";
  EXPECT_NE(options.Validate().message().find("--nats-tls-key"), std::string::npos);
  options.tls_key_file.clear();
  options.creds_file = "/nonexistent.creds";
  EXPECT_NE(options.Validate().message().find("--nats-creds-file"), std::string::npos);
  options.creds_file.clear();
  options.user = "u";
  EXPECT_NE(options.Validate().message().find("--nats-user"), std::string::npos);
  options.password = "p";
  options.token = "t";
  EXPECT_FALSE(options.Validate().ok());
}

}  // namespace
}  // namespace kvindex::nats
