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
  redials_ = counter("kvindex_nats_redials_total",
                     "New connections dialled, secret files read again, after the client "
                     "library closed the connection (refused credentials)");
  auth_failing_gauge_ = &prometheus::BuildGauge()
                             .Name("kvindex_nats_auth_failing")
                             .Help("1 from a refused NATS authentication until one is accepted")
                             .Register(*registry)
                             .Add(labels);
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
  connection->options_ = options;
  if (js_options == nullptr) {
    InitJsOptions(&connection->js_options_);
  } else {
    connection->js_options_ = *js_options;
  }
  if (!options.token_file.empty()) {
    connection->token_file_ = options.token_file;
    connection->token_ = options.token;
  }
  natsConnection* nc = nullptr;
  Status setter_error;
  const natsStatus s =
      connection->Dial(options, retry_initial, /*initial=*/true, &nc, &setter_error);
  KVINDEX_RETURN_IF_ERROR(setter_error);
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    // cnats released the connection without callbacks; `connection` is unused.
    Status status = FromNats(s, strings::Cat("connect to NATS (", options.Describe(), ")"));
    if (absl::IsPermissionDenied(status) || s == NATS_CONNECTION_AUTH_FAILED) {
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
  if (s == NATS_NOT_YET_CONNECTED) {
    if (connection->auth_failing()) {
      connection->logger_->warn(
          "NATS refused the credentials ({}); retrying in the background, reading them again",
          options.Describe());
    } else {
      connection->logger_->warn("NATS not reachable yet ({}); retrying in the background",
                                options.Describe());
    }
  } else {
    connection->SetConnected(true);
    connection->logger_->info("connected to NATS ({})", options.Describe());
    if (connection->hooks_.on_connected) connection->hooks_.on_connected();
  }
  {
    MutexLock lock(&connection->mu_);
    KVINDEX_RETURN_IF_ERROR(connection->Install(nc));
  }
  if (s == NATS_NOT_YET_CONNECTED && connection->auth_failing()) {
    // The first attempt was refused: not connected, whatever cnats's
    // background retry does next.
    connection->SetConnected(false);
  }
  if (options.keep_trying_auth) {
    Connection* self = connection.get();
    connection->redial_thread_ = std::thread([self] { self->RedialLoop(); });
  }
  return connection;
}

natsStatus Connection::Dial(const NatsOptions& options, bool retry, bool initial,
                            natsConnection** nc, Status* setter_error) {
  *nc = nullptr;
  Connection* self = this;
  natsOptions* raw_options = nullptr;
  if (natsOptions_Create(&raw_options) != NATS_OK) return NATS_NO_MEMORY;
  std::unique_ptr<natsOptions, OptionsDeleter> opts(raw_options);
  natsOptions* o = opts.get();
  // natsOptions_SetURL mis-parses comma-separated lists in cnats 3.4.1 ("No
  // server available" even with a live server in the list); pass an array.
  std::vector<std::string> urls;
  for (std::string_view one : strings::SplitTrimmed(options.url, ',')) urls.emplace_back(one);
  std::vector<const char*> url_pointers;
  for (const std::string& one : urls) url_pointers.push_back(one.c_str());
  natsStatus s =
      natsOptions_SetServers(o, url_pointers.data(), static_cast<int>(url_pointers.size()));
  const char* failed_flag = "--nats";
  auto set = [&s, &failed_flag](natsStatus next, const char* flag) {
    if (s == NATS_OK && next != NATS_OK) {
      s = next;
      failed_flag = flag;
    }
  };
  if (!options.name.empty()) set(natsOptions_SetName(o, options.name.c_str()), "name");
  if (!options.user.empty()) {
    set(natsOptions_SetUserInfo(o, options.user.c_str(), options.password.c_str()), "--nats-user");
  }
  if (!options.token_file.empty()) {
    // Re-read on every (re)connect: a token rotated in its file (a mounted
    // Secret) is picked up without a restart.
    set(natsOptions_SetTokenHandler(o, &Connection::TokenFromFile, self), "--nats-token-file");
  } else if (!options.token.empty()) {
    set(natsOptions_SetToken(o, options.token.c_str()), "--nats-token-file");
  }
  if (!options.nkey_seed_file.empty() && s == NATS_OK) {
    // cnats reads the seed file at every connect to sign, but takes the
    // public key once: it is derived here, per dial.
    StatusOr<std::string> public_key = internal::PublicKeyFromSeedFile(options.nkey_seed_file);
    if (!public_key.ok()) {
      if (setter_error != nullptr) *setter_error = public_key.status();
      return NATS_INVALID_ARG;  // mid-rotation when redialling: tried again
    }
    set(natsOptions_SetNKeyFromSeed(o, public_key->c_str(), options.nkey_seed_file.c_str()),
        "--nats-nkey-seed-file");
  }
  if (!options.creds_file.empty()) {
    // cnats reads the file again at every connect.
    set(natsOptions_SetUserCredentialsFromFiles(o, options.creds_file.c_str(), nullptr),
        "--nats-creds-file");
  }
  if (options.TlsEnabled()) {
    set(natsOptions_SetSecure(o, true), "--nats-tls-ca");
    if (!options.tls_ca_file.empty()) {
      set(natsOptions_LoadCATrustedCertificates(o, options.tls_ca_file.c_str()), "--nats-tls-ca");
    }
    if (!options.tls_cert_file.empty()) {
      set(natsOptions_LoadCertificatesChain(o, options.tls_cert_file.c_str(),
                                            options.tls_key_file.c_str()),
          "--nats-tls-cert");
    }
  }
  set(natsOptions_SetTimeout(o, options.connect_timeout.count()), "connect_timeout");
  // Never give up: an agent or router outlives any NATS outage.
  set(natsOptions_SetMaxReconnect(o, -1), "max_reconnect");
  set(natsOptions_SetCustomReconnectDelay(o, &Connection::ReconnectDelay, self), "reconnect_wait");
  set(natsOptions_SetReconnectBufSize(o, options.reconnect_buffer_bytes), "reconnect_buffer");
  set(natsOptions_SetDisconnectedCB(o, &Connection::OnDisconnected, self), "callbacks");
  set(natsOptions_SetReconnectedCB(o, &Connection::OnReconnected, self), "callbacks");
  set(natsOptions_SetClosedCB(o, &Connection::OnClosed, self), "callbacks");
  set(natsOptions_SetErrorHandler(o, &Connection::OnError, self), "callbacks");
  if (s != NATS_OK) {
    if (setter_error != nullptr) *setter_error = Setter(s, failed_flag);
    return s;
  }
  // The first attempt is always synchronous: cnats clears the error of a
  // failed first attempt as soon as its background retry starts, so bad
  // credentials could otherwise pass for an unreachable server.
  s = natsConnection_Connect(nc, o);
  const bool auth = s == NATS_CONNECTION_AUTH_FAILED || s == NATS_NOT_PERMITTED ||
                    absl::IsPermissionDenied(FromNats(s, ""));
  if (auth) CheckAuthFailure(nullptr, NATS_CONNECTION_AUTH_FAILED);
  // With keep_trying_auth, refused credentials at the first connect still
  // give the owner handles: cnats retries, is refused and closes, and the
  // redial loop takes over (later redials only keep what connected).
  const bool retry_auth = auth && options.keep_trying_auth && initial;
  if (retry && (s == NATS_NO_SERVER || s == NATS_TIMEOUT || s == NATS_IO_ERROR || retry_auth)) {
    s = natsOptions_SetRetryOnFailedConnect(o, true, &Connection::OnConnected, self);
    if (s == NATS_OK) s = natsConnection_Connect(nc, o);
  }
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) *nc = nullptr;
  return s;
}

Status Connection::Install(natsConnection* nc) {
  jsOptions copy = js_options_;
  jsCtx* js = nullptr;
  if (natsStatus s = natsConnection_JetStream(&js, nc, &copy); s != NATS_OK) {
    natsConnection_Close(nc);
    retired_.emplace_back(nc, nullptr);
    return FromNats(s, "JetStream context");
  }
  if (natsConnection* old = connection_.load(std::memory_order_relaxed); old != nullptr) {
    retired_.emplace_back(old, jetstream_.load(std::memory_order_relaxed));
  }
  jetstream_.store(js, std::memory_order_release);
  connection_.store(nc, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  // cnats may have closed it already (credentials refused at once): its
  // closed callback then found another connection current and left it here.
  closed_ = natsConnection_IsClosed(nc);
  if (closed_ && options_.keep_trying_auth) redial_ = true;
  closed_cv_.SignalAll();
  return absl::OkStatus();
}

void Connection::RedialLoop() {
  std::chrono::milliseconds backoff = reconnect_wait_;
  thread_local std::minstd_rand random(std::random_device{}());
  MutexLock lock(&mu_);
  while (true) {
    while (!redial_ && !stop_redial_) closed_cv_.Wait(&mu_);
    if (stop_redial_) return;
    // A pause first (jittered), so a fleet does not hammer a server that
    // refuses it; cut short by the destructor.
    std::uniform_int_distribution<int64_t> jitter(backoff.count() / 2, backoff.count());
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(jitter(random));
    while (!stop_redial_ && closed_cv_.WaitUntil(&mu_, until)) {
    }
    if (stop_redial_) return;
    backoff = std::min(backoff * 2, reconnect_wait_max_);
    mu_.Unlock();
    // Every secret is read again from its file (environment values stay).
    NatsOptions fresh = options_;
    if (!fresh.password_file.empty()) fresh.password.clear();
    if (!fresh.token_file.empty()) fresh.token.clear();
    Status loaded = LoadSecrets(&fresh);
    natsConnection* nc = nullptr;
    natsStatus s = NATS_CONNECTION_AUTH_FAILED;
    Status setter_error;
    if (loaded.ok()) s = Dial(fresh, /*retry=*/true, /*initial=*/false, &nc, &setter_error);
    if (redials_ != nullptr) redials_->Increment();
    mu_.Lock();
    if (nc == nullptr) {
      if (uint64_t suppressed = 0; redial_log_limiter_.Allow(&suppressed)) {
        logger_->warn("NATS redial (role {}) failed: {}; retrying in up to {} ms ({} suppressed)",
                      role_,
                      !loaded.ok()         ? loaded.ToString()
                      : !setter_error.ok() ? setter_error.ToString()
                                           : std::string(natsStatus_GetText(s)),
                      backoff.count(), suppressed);
      }
      continue;
    }
    redial_ = false;
    if (Status installed = Install(nc); !installed.ok()) {
      redial_ = true;
      continue;
    }
    if (s == NATS_OK) {
      backoff = reconnect_wait_;
      SetConnected(true);
      logger_->info("NATS connected again (role {}) with credentials read again", role_);
      if (hooks_.on_connected) {
        mu_.Unlock();
        hooks_.on_connected();
        mu_.Lock();
      }
    }
  }
}

Connection::~Connection() {
  {
    MutexLock lock(&mu_);
    stop_redial_ = true;
    closed_cv_.SignalAll();
  }
  if (redial_thread_.joinable()) redial_thread_.join();
  closing_.store(true, std::memory_order_relaxed);
  natsConnection* nc = connection_.load(std::memory_order_acquire);
  if (jsCtx* js = jetstream_.load(std::memory_order_acquire); js != nullptr) jsCtx_Destroy(js);
  if (nc != nullptr) natsConnection_Close(nc);
  {
    // The closed callback is the last one cnats delivers; after it nothing
    // references this object. Bounded: a stuck library must not hang shutdown.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    MutexLock lock(&mu_);
    while (nc != nullptr && !closed_ && closed_cv_.WaitUntil(&mu_, deadline)) {
    }
    if (nc != nullptr && !closed_) logger_->error("NATS closed callback not delivered within 10s");
    for (auto& [old_nc, old_js] : retired_) {
      if (old_js != nullptr) jsCtx_Destroy(old_js);
      natsConnection_Destroy(old_nc);
    }
    retired_.clear();
  }
  if (nc != nullptr) natsConnection_Destroy(nc);
}

bool Connection::connected() const {
  natsConnection* nc = raw();
  return nc != nullptr && natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED;
}

bool Connection::closed() const {
  natsConnection* nc = raw();
  return nc != nullptr && natsConnection_IsClosed(nc);
}

void Connection::SetConnected(bool connected) {
  if (connected_gauge_ != nullptr) connected_gauge_->Set(connected ? 1 : 0);
  if (connected) {
    // The server accepted the credentials.
    auth_failing_.store(false, std::memory_order_relaxed);
    if (auth_failing_gauge_ != nullptr) auth_failing_gauge_->Set(0);
  }
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
  auth_failing_.store(true, std::memory_order_relaxed);
  if (auth_failing_gauge_ != nullptr) auth_failing_gauge_->Set(1);
  if (auth_failures_total_ != nullptr) auth_failures_total_->Increment();
  if (uint64_t suppressed = 0; auth_log_limiter_.Allow(&suppressed)) {
    logger_->warn("NATS authentication failed ({}) for role {} ({} more suppressed)",
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
    self->logger_->error("NATS connection closed by the client library (role {}): {}{}",
                         self->role_, last != nullptr ? last : "no error",
                         self->options_.keep_trying_auth ? "; dialling anew" : "");
    if (self->hooks_.on_closed) self->hooks_.on_closed();
  }
  MutexLock lock(&self->mu_);
  // A callback of a connection already replaced cannot come (closed is the
  // last one, and a connection is replaced only after it).
  if (nc != self->connection_.load(std::memory_order_relaxed)) return;
  self->closed_ = true;
  if (self->options_.keep_trying_auth && !self->closing_.load(std::memory_order_relaxed)) {
    self->redial_ = true;
  }
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
