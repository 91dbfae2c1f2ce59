#include "shared/nats/connection.h"

#include <prometheus/family.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_join.h"
#include "shared/base/strings.h"
#include "shared/config/cli.h"
#include "shared/nats/internal/nkey.h"
#include "shared/nats/stream.h"

namespace kvindex::nats {
namespace {

bool Readable(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

Status CheckReadable(const std::string& path, std::string_view flag) {
  if (path.empty() || Readable(path)) return absl::OkStatus();
  return absl::InvalidArgumentError(strings::Cat(flag, ": cannot read ", path));
}

bool UrlHasCredentials(std::string_view url) {
  for (std::string_view one : strings::SplitTrimmed(url, ',')) {
    const size_t scheme = one.find("://");
    if (one.find('@', scheme == std::string_view::npos ? 0 : scheme + 3) !=
        std::string_view::npos) {
      return true;
    }
  }
  return false;
}

bool IsAuthText(std::string_view text) {
  return strings::ContainsIgnoreCase(text, "authorization violation") ||
         strings::ContainsIgnoreCase(text, "authentication");
}

// First line of a secret file, trimmed.
Status ReadSecretFile(const std::string& path, std::string_view flag, std::string* out) {
  std::ifstream file(path);
  if (!file) return absl::InvalidArgumentError(strings::Cat(flag, ": cannot read ", path));
  std::string line;
  std::getline(file, line);
  *out = std::string(strings::Trim(line));
  std::fill(line.begin(), line.end(), '\0');
  if (out->empty()) return absl::InvalidArgumentError(strings::Cat(flag, ": ", path, " is empty"));
  return absl::OkStatus();
}

struct OptionsDeleter {
  void operator()(natsOptions* options) const { natsOptions_Destroy(options); }
};

// Turns a cnats setter failure into InvalidArgument naming the flag.
Status Setter(natsStatus s, std::string_view flag) {
  if (s == NATS_OK) return absl::OkStatus();
  Status status = FromNats(s, flag);
  return absl::InvalidArgumentError(status.message());
}

}  // namespace

bool NatsOptions::TlsEnabled() const {
  return !tls_ca_file.empty() || !tls_cert_file.empty() || !tls_key_file.empty() ||
         strings::ContainsIgnoreCase(url, "tls://");
}

std::string NatsOptions::AuthKind() const {
  if (!creds_file.empty()) return "creds";
  if (!nkey_seed_file.empty()) return "nkey";
  if (!token.empty() || !token_file.empty()) return "token";
  if (!user.empty()) return "user/password";
  return "none";
}

Status NatsOptions::Validate() const {
  if (strings::Trim(url).empty()) {
    return absl::InvalidArgumentError("--nats: server URL required");
  }
  int kinds = 0;
  kinds += !user.empty() ? 1 : 0;
  kinds += (!token.empty() || !token_file.empty()) ? 1 : 0;
  kinds += !nkey_seed_file.empty() ? 1 : 0;
  kinds += !creds_file.empty() ? 1 : 0;
  if (kinds > 1) {
    return absl::InvalidArgumentError(
        "--nats-user, --nats-token-file, --nats-nkey-seed-file, --nats-creds-file: "
        "choose one kind of authentication");
  }
  if (!user.empty() && password.empty() && password_file.empty()) {
    return absl::InvalidArgumentError(
        "--nats-user: needs --nats-password-file or KVINDEX_NATS_PASSWORD");
  }
  if (user.empty() && (!password.empty() || !password_file.empty())) {
    return absl::InvalidArgumentError("--nats-password-file: needs --nats-user");
  }
  if (UrlHasCredentials(url)) {
    // A URL shows in `ps`, in logs and in the server's connz: secrets come
    // only from files or the environment (docs/operations.md, "Security").
    return absl::InvalidArgumentError(
        "--nats: credentials in the URL (user:password@ or token@) are refused; use --nats-user "
        "with --nats-password-file or KVINDEX_NATS_PASSWORD, --nats-token-file or "
        "KVINDEX_NATS_TOKEN, --nats-nkey-seed-file or --nats-creds-file");
  }
  KVINDEX_RETURN_IF_ERROR(CheckReadable(password_file, "--nats-password-file"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(token_file, "--nats-token-file"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(nkey_seed_file, "--nats-nkey-seed-file"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(creds_file, "--nats-creds-file"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(tls_ca_file, "--nats-tls-ca"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(tls_cert_file, "--nats-tls-cert"));
  KVINDEX_RETURN_IF_ERROR(CheckReadable(tls_key_file, "--nats-tls-key"));
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError(tls_cert_file.empty()
                                          ? "--nats-tls-key: needs --nats-tls-cert"
                                          : "--nats-tls-cert: needs --nats-tls-key");
  }
  if (connect_timeout.count() <= 0) {
    return absl::InvalidArgumentError("connect_timeout: must be positive");
  }
  if (reconnect_wait.count() <= 0 || reconnect_wait_max < reconnect_wait) {
    return absl::InvalidArgumentError(
        "reconnect_wait: must be positive and at most reconnect_wait_max");
  }
  if (reconnect_buffer_bytes < 0) {
    return absl::InvalidArgumentError("reconnect_buffer_bytes: negative");
  }
  return absl::OkStatus();
}

std::string NatsOptions::Describe() const {
  std::vector<std::string> urls;
  for (std::string_view one : strings::SplitTrimmed(url, ',')) {
    urls.push_back(config::RedactUrlCredentials(one));
  }
  return strings::Cat("url=", absl::StrJoin(urls, ","), " name=", name.empty() ? "-" : name,
                      " user=", user.empty() ? "-" : user, " auth=", AuthKind(),
                      " tls=", TlsEnabled() ? "on" : "off");
}

Status LoadSecrets(NatsOptions* options) {
  if (!options->password_file.empty()) {
    KVINDEX_RETURN_IF_ERROR(
        ReadSecretFile(options->password_file, "--nats-password-file", &options->password));
  } else if (options->password.empty()) {
    if (const char* env = std::getenv("KVINDEX_NATS_PASSWORD"); env != nullptr) {
      options->password = env;
    }
  }
  if (!options->token_file.empty()) {
    KVINDEX_RETURN_IF_ERROR(
        ReadSecretFile(options->token_file, "--nats-token-file", &options->token));
  } else if (options->token.empty()) {
    if (const char* env = std::getenv("KVINDEX_NATS_TOKEN"); env != nullptr) options->token = env;
  }
  return absl::OkStatus();
}

void Connection::InitJsOptions(jsOptions* options) {
  jsOptions_Init(options);
  options->Wait = 5000;
}

Connection::Connection(std::string_view role, Hooks hooks, prometheus::Registry* registry)
    : role_(role), hooks_(std::move(hooks)), logger_(log::Get("nats")) {
  if (registry == nullptr) return;
  const prometheus::Labels labels{{"role", role_}};
  connected_gauge_ = &prometheus::BuildGauge()
                          .Name("kvindex_nats_connected")
                          .Help("1 while the NATS connection is up, 0 otherwise")
                          .Register(*registry)
                          .Add(labels);
  auto counter = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry).Add(labels);
  };
  disconnects_ = counter("kvindex_nats_disconnects_total", "NATS connection losses");
  reconnects_ = counter("kvindex_nats_reconnects_total", "NATS reconnections that succeeded");
  auth_failures_total_ =
      counter("kvindex_nats_auth_failures_total",
              "NATS authentication failures (initial connect and reconnect attempts)");
  errors_ = counter("kvindex_nats_errors_total",
                    "Asynchronous NATS errors reported by the client library");
}

StatusOr<std::unique_ptr<Connection>> Connection::Connect(const NatsOptions& options,
                                                          prometheus::Registry* registry,
                                                          std::string_view role, Hooks hooks,
                                                          bool retry_initial,
                                                          const jsOptions* js_options) {
  KVINDEX_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Connection> connection(new Connection(role, std::move(hooks), registry));
  connection->reconnect_wait_ = options.reconnect_wait;
  connection->reconnect_wait_max_ = options.reconnect_wait_max;
  Connection* self = connection.get();

  natsOptions* raw_options = nullptr;
  if (natsOptions_Create(&raw_options) != NATS_OK) {
    return absl::InternalError("natsOptions_Create failed");
  }
  std::unique_ptr<natsOptions, OptionsDeleter> opts(raw_options);
  natsOptions* o = opts.get();
  // natsOptions_SetURL mis-parses comma-separated lists in cnats 3.4.1 ("No
  // server available" even with a live server in the list); pass an array.
  std::vector<std::string> urls;
  for (std::string_view one : strings::SplitTrimmed(options.url, ',')) urls.emplace_back(one);
  std::vector<const char*> url_pointers;
  for (const std::string& one : urls) url_pointers.push_back(one.c_str());
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetServers(o, url_pointers.data(), static_cast<int>(url_pointers.size())),
             "--nats"));
  if (!options.name.empty()) {
    KVINDEX_RETURN_IF_ERROR(Setter(natsOptions_SetName(o, options.name.c_str()), "name"));
  }
  if (!options.user.empty()) {
    KVINDEX_RETURN_IF_ERROR(Setter(
        natsOptions_SetUserInfo(o, options.user.c_str(), options.password.c_str()), "--nats-user"));
  }
  if (!options.token_file.empty()) {
    // Re-read on every (re)connect: a token rotated in its file (a mounted
    // Secret) is picked up without a restart.
    connection->token_file_ = options.token_file;
    connection->token_ = options.token;
    KVINDEX_RETURN_IF_ERROR(Setter(natsOptions_SetTokenHandler(o, &Connection::TokenFromFile, self),
                                   "--nats-token-file"));
  } else if (!options.token.empty()) {
    KVINDEX_RETURN_IF_ERROR(
        Setter(natsOptions_SetToken(o, options.token.c_str()), "--nats-token-file"));
  }
  if (!options.nkey_seed_file.empty()) {
    KVINDEX_ASSIGN_OR_RETURN(std::string public_key,
                             internal::PublicKeyFromSeedFile(options.nkey_seed_file));
    KVINDEX_RETURN_IF_ERROR(
        Setter(natsOptions_SetNKeyFromSeed(o, public_key.c_str(), options.nkey_seed_file.c_str()),
               "--nats-nkey-seed-file"));
  }
  if (!options.creds_file.empty()) {
    KVINDEX_RETURN_IF_ERROR(
        Setter(natsOptions_SetUserCredentialsFromFiles(o, options.creds_file.c_str(), nullptr),
               "--nats-creds-file"));
  }
  if (options.TlsEnabled()) {
    KVINDEX_RETURN_IF_ERROR(Setter(natsOptions_SetSecure(o, true), "--nats-tls-ca"));
    if (!options.tls_ca_file.empty()) {
      KVINDEX_RETURN_IF_ERROR(Setter(
          natsOptions_LoadCATrustedCertificates(o, options.tls_ca_file.c_str()), "--nats-tls-ca"));
    }
    if (!options.tls_cert_file.empty()) {
      KVINDEX_RETURN_IF_ERROR(
          Setter(natsOptions_LoadCertificatesChain(o, options.tls_cert_file.c_str(),
                                                   options.tls_key_file.c_str()),
                 "--nats-tls-cert"));
    }
  }
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetTimeout(o, options.connect_timeout.count()), "connect_timeout"));
  // Never give up: an agent or router outlives any NATS outage.
  KVINDEX_RETURN_IF_ERROR(Setter(natsOptions_SetMaxReconnect(o, -1), "max_reconnect"));
  KVINDEX_RETURN_IF_ERROR(Setter(
      natsOptions_SetCustomReconnectDelay(o, &Connection::ReconnectDelay, self), "reconnect_wait"));
  KVINDEX_RETURN_IF_ERROR(Setter(natsOptions_SetReconnectBufSize(o, options.reconnect_buffer_bytes),
                                 "reconnect_buffer"));
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetDisconnectedCB(o, &Connection::OnDisconnected, self), "callbacks"));
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetReconnectedCB(o, &Connection::OnReconnected, self), "callbacks"));
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetClosedCB(o, &Connection::OnClosed, self), "callbacks"));
  KVINDEX_RETURN_IF_ERROR(
      Setter(natsOptions_SetErrorHandler(o, &Connection::OnError, self), "callbacks"));
  // The first attempt is always synchronous: cnats clears the error of a
  // failed first attempt as soon as its background retry starts, so bad
  // credentials could otherwise pass for an unreachable server.
  natsConnection* nc = nullptr;
  natsStatus s = natsConnection_Connect(&nc, o);
  if (retry_initial && (s == NATS_NO_SERVER || s == NATS_TIMEOUT || s == NATS_IO_ERROR)) {
    KVINDEX_RETURN_IF_ERROR(Setter(
        natsOptions_SetRetryOnFailedConnect(o, true, &Connection::OnConnected, self), "retry"));
    s = natsConnection_Connect(&nc, o);
  }
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    // cnats released the connection without callbacks; `connection` is unused.
    Status status = FromNats(s, strings::Cat("connect to NATS (", options.Describe(), ")"));
    if (absl::IsPermissionDenied(status) || s == NATS_CONNECTION_AUTH_FAILED) {
      connection->CheckAuthFailure(nullptr, NATS_CONNECTION_AUTH_FAILED);
      return absl::PermissionDeniedError(status.message());
    }
    // With TLS 1.3 a server that demands a client certificate accepts the
    // handshake and then drops the connection: cnats sees no PONG.
    if (s == NATS_PROTOCOL_ERROR && options.TlsEnabled() && options.tls_cert_file.empty()) {
      return absl::PermissionDeniedError(strings::Cat(
          status.message(), " (the server may require a client certificate: --nats-tls-cert)"));
    }
    return status;
  }
  connection->connection_ = nc;
  if (s == NATS_NOT_YET_CONNECTED) {
    connection->logger_->warn("NATS not reachable yet ({}); retrying in the background",
                              options.Describe());
  } else {
    connection->SetConnected(true);
    connection->logger_->info("connected to NATS ({})", options.Describe());
    if (connection->hooks_.on_connected) connection->hooks_.on_connected();
  }

  jsOptions defaults;
  if (js_options == nullptr) {
    InitJsOptions(&defaults);
    js_options = &defaults;
  }
  jsOptions copy = *js_options;
  jsCtx* js = nullptr;
  KVINDEX_RETURN_IF_ERROR(FromNats(natsConnection_JetStream(&js, nc, &copy), "JetStream context"));
  connection->jetstream_ = js;
  return connection;
}

Connection::~Connection() {
  if (jetstream_ != nullptr) jsCtx_Destroy(jetstream_);
  if (connection_ == nullptr) return;
  closing_.store(true, std::memory_order_relaxed);
  natsConnection_Close(connection_);
  {
    // The closed callback is the last one cnats delivers; after it nothing
    // references this object. Bounded: a stuck library must not hang shutdown.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    MutexLock lock(&mu_);
    while (!closed_ && closed_cv_.WaitUntil(&mu_, deadline)) {
    }
    if (!closed_) logger_->error("NATS closed callback not delivered within 10s");
  }
  natsConnection_Destroy(connection_);
}

bool Connection::connected() const {
  return connection_ != nullptr && natsConnection_Status(connection_) == NATS_CONN_STATUS_CONNECTED;
}

bool Connection::closed() const {
  return connection_ != nullptr && natsConnection_IsClosed(connection_);
}

void Connection::SetConnected(bool connected) {
  if (connected_gauge_ != nullptr) connected_gauge_->Set(connected ? 1 : 0);
}

bool Connection::CheckAuthFailure(natsConnection* nc, natsStatus status) {
  std::string text;
  bool auth = status == NATS_CONNECTION_AUTH_FAILED || status == NATS_NOT_PERMITTED;
  if (nc != nullptr) {
    const char* last = nullptr;
    const natsStatus last_status = natsConnection_GetLastError(nc, &last);
    if (last != nullptr) text = last;
    auth = auth || last_status == NATS_CONNECTION_AUTH_FAILED ||
           last_status == NATS_NOT_PERMITTED || IsAuthText(text);
  }
  if (!auth) return false;
  auth_failures_.fetch_add(1, std::memory_order_relaxed);
  if (auth_failures_total_ != nullptr) auth_failures_total_->Increment();
  if (uint64_t suppressed = 0; auth_log_limiter_.Allow(&suppressed)) {
    logger_->error("NATS authentication failed ({}) for role {} ({} more suppressed)",
                   text.empty() ? natsStatus_GetText(status) : text, role_, suppressed);
  }
  return true;
}

void Connection::OnDisconnected(natsConnection* nc, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  self->SetConnected(false);
  // Our own Close is no connection loss: no count, no warning, no hook.
  if (self->closing_.load(std::memory_order_relaxed)) return;
  if (self->disconnects_ != nullptr) self->disconnects_->Increment();
  self->CheckAuthFailure(nc, NATS_OK);
  self->logger_->warn("NATS connection lost (role {}); reconnecting", self->role_);
  if (self->hooks_.on_disconnected) self->hooks_.on_disconnected();
}

void Connection::OnReconnected(natsConnection*, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  self->SetConnected(true);
  if (self->reconnects_ != nullptr) self->reconnects_->Increment();
  self->logger_->info("NATS reconnected (role {})", self->role_);
  if (self->hooks_.on_reconnected) self->hooks_.on_reconnected();
}

void Connection::OnConnected(natsConnection*, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  self->SetConnected(true);
  self->logger_->info("NATS connected (role {})", self->role_);
  if (self->hooks_.on_connected) self->hooks_.on_connected();
}

void Connection::OnClosed(natsConnection* nc, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  self->SetConnected(false);
  if (!self->closing_.load(std::memory_order_relaxed)) {
    // cnats gave up on its own (e.g. the same auth error twice in a row);
    // the failures themselves were counted as they happened.
    const char* last = nullptr;
    natsConnection_GetLastError(nc, &last);
    self->logger_->error("NATS connection closed by the client library (role {}): {}", self->role_,
                         last != nullptr ? last : "no error");
    if (self->hooks_.on_closed) self->hooks_.on_closed();
  }
  MutexLock lock(&self->mu_);
  self->closed_ = true;
  self->closed_cv_.SignalAll();
}

void Connection::OnError(natsConnection* nc, natsSubscription*, natsStatus err, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  if (self->errors_ != nullptr) self->errors_->Increment();
  if (self->CheckAuthFailure(nc, err)) return;
  if (uint64_t suppressed = 0; self->error_log_limiter_.Allow(&suppressed)) {
    self->logger_->warn("NATS asynchronous error: {} ({} more suppressed)", natsStatus_GetText(err),
                        suppressed);
  }
}

const char* Connection::TokenFromFile(void* closure) {
  auto* self = static_cast<Connection*>(closure);
  std::string fresh;
  // An unreadable or empty file (mid-rotation) keeps the last good token.
  if (ReadSecretFile(self->token_file_, "--nats-token-file", &fresh).ok()) {
    self->token_ = std::move(fresh);
  }
  return self->token_.c_str();
}

int64_t Connection::ReconnectDelay(natsConnection*, int attempts, void* closure) {
  auto* self = static_cast<Connection*>(closure);
  // Exponential per round over the server list, capped, with full jitter in
  // the upper half so a fleet of agents does not reconnect in lockstep.
  const int64_t base = self->reconnect_wait_.count();
  const int64_t cap = self->reconnect_wait_max_.count();
  const int shift = std::clamp(attempts - 1, 0, 30);
  const int64_t delay = std::min(cap, base << std::min(shift, 20));
  thread_local std::minstd_rand random(std::random_device{}());
  std::uniform_int_distribution<int64_t> jitter(delay / 2, delay);
  return jitter(random);
}

}  // namespace kvindex::nats
