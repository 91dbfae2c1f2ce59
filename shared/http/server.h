// kvindex::http::Server: a small embeddable HTTP/1.1 server (civetweb inside)
// for the JSON APIs, /metrics, /healthz and /readyz of kvindex services.
//
// Use it for every HTTP endpoint a kvindex binary serves; use
// shared/http/client.h to call one. Handlers are plain functions from a
// parsed Request to a Response: no civetweb type escapes this header.
//
//   kvindex::http::ServerOptions options;
//   options.listen = "127.0.0.1:0";          // port 0 = pick a free port
//   kvindex::http::Server server(options);
//   server.Handle("GET", "/healthz", [](const Request&, Response& r) {
//     r.body = "ok\n"; r.content_type = "text/plain";
//   }, {.open = true});
//   KVINDEX_RETURN_IF_ERROR(server.Start());
//   ... server.port() ...
//   server.Stop();
//
// Routing is by exact path. A known path with another method answers 405
// (with an Allow header), an unknown path 404, both as {"error": "..."}.
// A request body larger than ServerOptions::max_body_bytes is refused with
// 413 from its Content-Length, before the body is read. With a bearer token
// configured, every route not marked `open` answers 401 unless the request
// carries `Authorization: Bearer <token>`.
//
// Connections are kept alive; each connection occupies one worker thread
// while open (civetweb's model), so `threads` must cover the number of
// concurrent client connections expected (load generators included).
//
// Thread safety: Handle() only before Start(). Start()/Stop() from one
// controlling thread; both idempotent, Start() after Stop() starts again.
// Handlers run concurrently on the worker threads and must be thread-safe.
#pragma once

#include "shared/base/json_escape.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::http {

// Bytes of zeroed, readable memory that follow Request::body (simdjson needs
// SIMDJSON_PADDING = 64 of them to parse in place).
inline constexpr size_t kBodyPadding = 64;

struct Request {
  std::string_view method;  // "GET", "POST", ...
  std::string_view path;    // URL-decoded path without the query string
  std::string_view query;   // after '?', may be empty
  // The request body; kBodyPadding readable zero bytes follow it.
  std::string_view body;
  // Case-insensitive header lookup; empty when absent.
  std::string_view Header(std::string_view name) const;

  // Internal: raw header pairs (valid during the handler call only).
  const void* internal_headers = nullptr;
  int internal_num_headers = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra response headers (name, value).
  std::vector<std::pair<std::string, std::string>> headers;
};

// Sets status and body to {"error": message} (message JSON-escaped).
void SetError(Response& response, int status, std::string_view message);

// The escaper for JSON bodies (shared/base/json_escape.h).
using ::kvindex::AppendJsonEscaped;

using Handler = std::function<void(const Request&, Response&)>;

struct RouteOptions {
  // Served without authentication even when a bearer token is configured
  // (/healthz, /readyz). Default: false.
  bool open = false;
};

struct ServerOptions {
  // "host:port" to listen on; port 0 picks a free port (see Server::port()).
  // Default: "127.0.0.1:8080". Not reloadable.
  std::string listen = "127.0.0.1:8080";
  // Worker threads = maximum concurrent connections served. Default: 32.
  uint32_t threads = 32;
  // Largest request body accepted, in bytes; larger -> 413. Default: 8 MiB.
  size_t max_body_bytes = size_t{8} << 20;
  // Idle keep-alive / request read timeout, in milliseconds. Default: 30000.
  uint32_t request_timeout_ms = 30000;
  // Bearer token required on non-open routes; empty = no authentication.
  // Default: "".
  std::string bearer_token;

  Status Validate() const;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // Stop()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Registers `handler` for (method, path). Call before Start().
  void Handle(std::string_view method, std::string_view path, Handler handler,
              RouteOptions route_options = {});

  // Binds and starts the worker threads. Unavailable when the address cannot
  // be bound, InvalidArgument for bad options. No-op when running.
  Status Start();
  // Stops accepting, waits for in-flight requests. Idempotent.
  void Stop();

  bool running() const;
  // The bound port (after Start(); resolves port 0), else 0.
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvindex::http
