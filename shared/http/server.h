// kvindex::http::Server: a small embeddable HTTP/1.1 server (an event loop on
// Boost.Beast/Asio; the older civetweb thread-per-connection server stays
// selectable for the benchmark comparison) for the JSON APIs, /metrics,
// /healthz and /readyz of kvindex services.
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
// Routing is by exact (percent-decoded) path. With a bearer token
// configured, every path that is not `open` answers 401 unless the request
// carries `Authorization: Bearer <token>`, checked before routing. A known
// path with another method answers 405 (with an Allow header), an unknown
// path 404; HEAD is served wherever GET is. Every error is {"error": "..."}.
// A request body larger than ServerOptions::max_body_bytes is refused with
// 413 from its Content-Length, before the body is read (and before any
// "100 Continue").
//
// Event loop bounds on what a client makes the server buffer, before any
// authentication: the request line and header 16 KiB (431), a chunk-size
// line 16 KiB with chunk extensions at most 256 bytes (400), the trailer
// section 16 KiB (431), a body max_body_bytes (413) and all bodies together
// max_body_total_bytes (503 + Retry-After). A percent-encoded '/' in the
// path, obs-fold and a missing or repeated Host (HTTP/1.1) are 400.
//
// Event loop (the default backend): `threads` I/O threads serve every
// connection; handlers run on them, so they must not block (a route that
// must is registered with `offload`). Past `max_connections` (or
// `max_connections_per_client` from one address) a connection is shed with
// 503 + Retry-After, except that requests for open GET routes (/healthz,
// /readyz) are still served on it; at the limit the oldest idle kept-alive
// connection is closed to make room first, and under pressure (3/4 of the
// limit) a request header gets at most 2 s. Timeouts: idle keep-alive (`idle_timeout_ms`, closed
// silently), the whole request header (`header_timeout_ms`, 408) and the whole body
// (`body_timeout_ms`, 408), each a total deadline, not reset by progress.
// After an error response the connection closes with a lingering close so
// a client still sending its body reads the response.
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

  // Internal: the backend's headers and their lookup (valid during the
  // handler call only).
  const void* internal_headers = nullptr;
  std::string_view (*internal_lookup)(const void* headers, std::string_view name) = nullptr;
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
  // The handler may block for long (a checkpoint export): the event loop
  // runs it on the server's one background thread, never on an I/O thread,
  // one such request at a time; another one meanwhile is answered 503 +
  // Retry-After. Default: false.
  bool offload = false;
};

enum class Backend {
  // Boost.Beast/Asio, a fixed number of I/O threads (the default).
  kEventLoop,
  // civetweb, one worker thread per open connection: the former server, kept
  // for the benchmark comparison (docs/benchmarks.md, "HTTP"). Only the
  // listen address, threads, max_body_bytes, body_timeout_ms and the bearer
  // token apply to it.
  kThreadPerConnection,
};

struct ServerOptions {
  // "host:port" to listen on, host an IPv4 literal, "[IPv6]" or "localhost";
  // port 0 picks a free port (see Server::port()). Default: "127.0.0.1:8080".
  std::string listen = "127.0.0.1:8080";
  Backend backend = Backend::kEventLoop;
  // Event loop: I/O threads. Thread per connection: worker threads = the
  // concurrent connections served. Default: 2.
  uint32_t threads = 2;
  // Largest request body accepted, in bytes; larger -> 413. Default: 8 MiB.
  size_t max_body_bytes = size_t{8} << 20;
  // Event loop: request bodies held in memory at once, all connections
  // together (a Content-Length is charged when the header arrives, a chunk
  // when its size line does); past it 503 + Retry-After. At least
  // max_body_bytes. Default: 64 MiB.
  size_t max_body_total_bytes = size_t{64} << 20;
  // Connections served at once; past it, 503 + Retry-After (open GET routes
  // still answered). A new connection at the limit first closes the oldest
  // idle kept-alive one. Default: 1024.
  uint32_t max_connections = 1024;
  // Event loop: connections served at once from one client address; past
  // it the client's further connections are treated as past
  // max_connections. 0 = half of max_connections. Default: 0.
  uint32_t max_connections_per_client = 0;
  // A kept-alive connection with no request byte for this long is closed.
  // Default: 60 s.
  uint32_t idle_timeout_ms = 60000;
  // The whole request header must arrive within this, from its first byte;
  // else 408. Default: 10 s.
  uint32_t header_timeout_ms = 10000;
  // The whole body must arrive within this, from the end of the header;
  // else 408. Default: 30 s.
  uint32_t body_timeout_ms = 30000;
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
