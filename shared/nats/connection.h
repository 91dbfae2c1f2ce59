// A NATS connection with a JetStream context, reconnect policy, auth (user +
// password, token, NKey seed, creds file), TLS, and connection metrics.
//
//   nats::NatsOptions options;
//   options.url = "nats://10.0.0.1:4222,nats://10.0.0.2:4222";
//   options.user = "agent";
//   options.password_file = "/run/secrets/nats-password";
//   KVINDEX_RETURN_IF_ERROR(nats::LoadSecrets(&options));  // files / env only
//   KVINDEX_RETURN_IF_ERROR(options.Validate());
//   KVINDEX_ASSIGN_OR_RETURN(auto connection,
//       nats::Connection::Connect(options, &registry, "agent", {}, /*retry_initial=*/true));
//   js_PublishAsync(connection->jetstream(), subject, data, size, nullptr);
//
// Secrets (password, token, seed and creds contents) never reach a log line
// or a Status message: Describe() names only the kind of auth in use.
//
// Rotation: a token file is read again at every reconnect (cnats asks for the
// token each time); a creds file is read by cnats at every connect. A
// password or NKey seed cannot be changed inside a cnats connection, so with
// keep_trying_auth a refused reconnect (cnats closes the connection after the
// same authentication error twice) leads to a new connection dialled with
// every secret file read again. raw() and jetstream() then return the new
// handles and generation() grows: owners re-create what they made on the
// old ones (subscriptions, JetStream contexts). Old handles stay valid, and
// closed, until the Connection is destroyed.
//
// Thread safety: Connection is thread safe (cnats connections are); hooks run
// on cnats threads and must not block long.
#pragma once

#include <nats/nats.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/log/log.h"

namespace kvindex::nats {

struct NatsOptions {
  // Comma-separated server URLs (nats:// or tls://). Required.
  std::string url;
  // Client name shown by the server (connz). Default: "".
  std::string name;
  // User for user/password auth. Default: "".
  std::string user;
  // Secret: never logged. Filled by LoadSecrets from password_file or
  // KVINDEX_NATS_PASSWORD. Default: "".
  std::string password;
  // File whose first line (trimmed) is the password. Default: "".
  std::string password_file;
  // Secret: never logged. Filled by LoadSecrets from token_file or
  // KVINDEX_NATS_TOKEN. Default: "".
  std::string token;
  // File whose first line (trimmed) is the token; read again at every
  // reconnect, so a rotated token is picked up. Default: "".
  std::string token_file;
  // File holding a user NKey seed ("SU..."); the public key is derived.
  // Default: "".
  std::string nkey_seed_file;
  // NATS .creds file (user JWT + seed). Default: "".
  std::string creds_file;
  // TLS: CA bundle to verify servers, client certificate and key. TLS is on
  // when any is set or a URL starts with tls://. Default: "" (each).
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // Time for one TCP + TLS + CONNECT handshake. Default: 2s.
  std::chrono::milliseconds connect_timeout{2000};
  // First reconnect backoff step; doubles per round over the server list,
  // with jitter. Default: 100ms.
  std::chrono::milliseconds reconnect_wait{100};
  // Backoff cap. Default: 2s.
  std::chrono::milliseconds reconnect_wait_max{2000};
  // Bytes of publishes buffered while reconnecting; a publish beyond this
  // fails instead of blocking. Default: 8 MiB.
  int reconnect_buffer_bytes = 8 << 20;
  // Never give up on refused credentials (agents and routers set it): an
  // authentication failure at the first connect, or the client library
  // closing the connection after refused reconnects, makes the Connection
  // dial anew in the background, with every secret file read again
  // (password, token, NKey seed, creds), backing off from reconnect_wait to
  // reconnect_wait_max, until the server accepts. Connect then returns OK
  // (not connected) instead of PermissionDenied. Default: false.
  bool keep_trying_auth = false;

  bool TlsEnabled() const;
  // "user/password", "token", "nkey", "creds" or "none".
  std::string AuthKind() const;
  // InvalidArgument naming the flag: missing --nats, cert without key, a file
  // that cannot be read, two auth kinds at once, bad timings.
  Status Validate() const;
  // For logs: URLs (credentials in them redacted), name, user, auth kind,
  // TLS on/off. Never a secret.
  std::string Describe() const;
};

// Fills password and token from password_file / token_file (first line,
// trimmed) or, when still empty, from KVINDEX_NATS_PASSWORD /
// KVINDEX_NATS_TOKEN. Secrets come from files or the environment only, never
// from command-line values. InvalidArgument naming the flag when a file
// cannot be read or is empty.
Status LoadSecrets(NatsOptions* options);

class Connection {
 public:
  // Each optional; called from cnats threads; must not block long.
  struct Hooks {
    std::function<void()> on_disconnected;
    std::function<void()> on_reconnected;
    // The first connection is up: called inline by Connect when the server
    // answered at once, or from a cnats thread when a background initial
    // retry (retry_initial) succeeds.
    std::function<void()> on_connected;
    // cnats gave up for good (it does after the same authentication error
    // twice in a row while reconnecting). Without keep_trying_auth the owner
    // must Connect again or exit; with it the Connection dials anew by
    // itself. Not called for the close done by ~Connection.
    std::function<void()> on_closed;
  };

  // jsOptions defaults for the JetStream context: jsOptions_Init + Wait 5s.
  // A publisher sets PublishAsync.MaxPending / AckHandler / ErrHandler /
  // StallWait on top and passes the struct to Connect.
  static void InitJsOptions(jsOptions* options);

  // Connects (options must have passed Validate; LoadSecrets is the caller's).
  // With `retry_initial`, a server that is down at start is retried in the
  // background and Connect returns OK with connected() == false. An
  // authentication failure at the first attempt is returned as
  // PermissionDenied either way (never retried silently); later ones are
  // counted and logged once per 10 s. Unavailable when no server answered
  // (retry_initial false). `registry` may be null (no metrics); `role`
  // ("agent" | "router") labels the metrics. `js_options` null means
  // InitJsOptions defaults; the struct is copied, its closures must outlive
  // the connection.
  static StatusOr<std::unique_ptr<Connection>> Connect(const NatsOptions& options,
                                                       prometheus::Registry* registry,
                                                       std::string_view role, Hooks hooks,
                                                       bool retry_initial,
                                                       const jsOptions* js_options = nullptr);

  // Closes the connection (pending publishes are flushed best effort) and
  // waits for cnats to deliver its last callback.
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // The current handles (see "Rotation"); never null once Connect returned.
  natsConnection* raw() const { return connection_.load(std::memory_order_acquire); }
  jsCtx* jetstream() const { return jetstream_.load(std::memory_order_acquire); }
  // Grows by one each time the handles are replaced by a new connection.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  bool connected() const;
  // True once cnats closed the current connection for good (see
  // Hooks::on_closed); with keep_trying_auth, until the next one is up.
  bool closed() const;
  // Authentication failures seen (initial and reconnect); mirrors the metric.
  uint64_t auth_failures() const { return auth_failures_.load(std::memory_order_relaxed); }
  // True from a refused authentication until a connection is accepted
  // again (readiness: a process whose credentials are refused is not ready).
  bool auth_failing() const { return auth_failing_.load(std::memory_order_relaxed); }

 private:
  Connection(std::string_view role, Hooks hooks, prometheus::Registry* registry);

  // cnats callbacks; `closure` is the Connection.
  static void OnDisconnected(natsConnection* nc, void* closure);
  static void OnReconnected(natsConnection* nc, void* closure);
  static void OnConnected(natsConnection* nc, void* closure);
  static void OnClosed(natsConnection* nc, void* closure);
  static void OnError(natsConnection* nc, natsSubscription* sub, natsStatus err, void* closure);
  static int64_t ReconnectDelay(natsConnection* nc, int attempts, void* closure);
  // --nats-token-file: read again at every connect and reconnect.
  static const char* TokenFromFile(void* closure);

  // Counts and (rate limited) logs an auth failure when the connection's last
  // error is one. True when it was.
  bool CheckAuthFailure(natsConnection* nc, natsStatus status);
  void SetConnected(bool connected);
  // Builds the cnats options from `options` (secrets loaded) and connects:
  // one synchronous attempt; with `retry` a server that did not answer (and,
  // with keep_trying_auth, refused credentials at the first connect) is
  // retried in the background (*nc set, NATS_NOT_YET_CONNECTED). Returns
  // the cnats status; *nc is set for NATS_OK and NATS_NOT_YET_CONNECTED.
  // A cnats option setter that failed (a bad CA file, seed file) is also
  // put into *setter_error as InvalidArgument naming the flag.
  natsStatus Dial(const NatsOptions& options, bool retry, bool initial, natsConnection** nc,
                  Status* setter_error);
  // Takes `nc` as the current connection (the previous one is kept, closed,
  // until the destructor).
  Status Install(natsConnection* nc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // keep_trying_auth: the thread that dials anew after cnats closed the
  // connection, reading every secret file again per attempt.
  void RedialLoop();

  const std::string role_;
  const Hooks hooks_;
  const std::shared_ptr<spdlog::logger> logger_;
  std::chrono::milliseconds reconnect_wait_{100};
  std::chrono::milliseconds reconnect_wait_max_{2000};
  // As given to Connect, secrets loaded (read again from their files per
  // redial); the JetStream options for every context made.
  NatsOptions options_;
  jsOptions js_options_{};
  std::atomic<natsConnection*> connection_{nullptr};
  // --nats-token-file and the token last read from it. Only TokenFromFile
  // touches token_ after Connect, and cnats calls it from one connect attempt
  // at a time.
  std::string token_file_;
  std::string token_;
  std::atomic<jsCtx*> jetstream_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> auth_failures_{0};
  std::atomic<bool> auth_failing_{false};
  // Set by the destructor before it closes the connection.
  std::atomic<bool> closing_{false};
  log::RateLimiter auth_log_limiter_{std::chrono::seconds(10)};
  log::RateLimiter error_log_limiter_{std::chrono::seconds(10)};
  log::RateLimiter redial_log_limiter_{std::chrono::seconds(10)};

  // Metrics; null without a registry.
  prometheus::Gauge* connected_gauge_ = nullptr;
  prometheus::Counter* disconnects_ = nullptr;
  prometheus::Counter* reconnects_ = nullptr;
  prometheus::Counter* auth_failures_total_ = nullptr;
  prometheus::Counter* errors_ = nullptr;
  prometheus::Counter* redials_ = nullptr;
  prometheus::Gauge* auth_failing_gauge_ = nullptr;

  // Lets the destructor wait until cnats has delivered the closed callback,
  // after which no callback touches this object.
  Mutex mu_;
  CondVar closed_cv_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // keep_trying_auth: cnats closed the current connection; the redial
  // thread dials anew. `stop_redial_` ends it (destructor).
  bool redial_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_redial_ ABSL_GUARDED_BY(mu_) = false;
  // Connections replaced, closed: destroyed by the destructor.
  std::vector<std::pair<natsConnection*, jsCtx*>> retired_ ABSL_GUARDED_BY(mu_);
  std::thread redial_thread_;
};

}  // namespace kvindex::nats
