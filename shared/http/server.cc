// civetweb-backed implementation of kvindex::http::Server.
//
// Requests are taken in civetweb's begin_request callback, before civetweb's
// own URI handling (no document root, no file serving), and the whole
// response (status line, headers, body) goes out in one mg_write.
#include "shared/http/server.h"

#include <civetweb.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "shared/base/strings.h"

namespace kvindex::http {
namespace {

using strings::Cat;

std::string_view StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// Constant-time comparison so the token cannot be guessed byte by byte.
bool TokenEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// A growable byte buffer that always has kBodyPadding spare bytes after
// `capacity`, and copies only the bytes in use when it grows.
struct BodyBuffer {
  std::unique_ptr<char[]> data;
  size_t capacity = 0;  // usable bytes, padding excluded

  void Reserve(size_t bytes) {
    if (data != nullptr && bytes <= capacity) return;
    const size_t grown = std::max({bytes, capacity * 2, size_t{4096}});
    auto bigger = std::make_unique_for_overwrite<char[]>(grown + kBodyPadding);
    if (data != nullptr) std::memcpy(bigger.get(), data.get(), capacity);
    data = std::move(bigger);
    capacity = grown;
  }
};

// civetweb's library init is process-wide and reference counted.
std::once_flag g_init_once;

}  // namespace

void SetError(Response& response, int status, std::string_view message) {
  response.status = status;
  response.content_type = "application/json";
  response.body.clear();
  response.body.append("{\"error\": \"");
  AppendJsonEscaped(message, &response.body);
  response.body.append("\"}\n");
}

std::string_view Request::Header(std::string_view name) const {
  const auto* headers = static_cast<const mg_header*>(internal_headers);
  for (int i = 0; i < internal_num_headers; ++i) {
    const char* key = headers[i].name;
    if (key != nullptr && std::strlen(key) == name.size() &&
        strncasecmp(key, name.data(), name.size()) == 0) {
      return headers[i].value != nullptr ? std::string_view(headers[i].value) : std::string_view();
    }
  }
  return {};
}

Status ServerOptions::Validate() const {
  if (listen.empty()) return absl::InvalidArgumentError("http: listen address is empty");
  const size_t colon = listen.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos ||
      !strings::ParseUnsigned(std::string_view(listen).substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(Cat("http: listen address '", listen, "' is not host:port"));
  }
  if (threads == 0 || threads > 4096) {
    return absl::InvalidArgumentError(Cat("http: threads must be in [1, 4096], got ", threads));
  }
  if (max_body_bytes == 0) return absl::InvalidArgumentError("http: max_body_bytes must be > 0");
  return absl::OkStatus();
}

struct Server::Impl {
  struct Route {
    Handler handler;
    RouteOptions options;
  };
  struct PathRoutes {
    std::string path;
    std::vector<std::pair<std::string, Route>> by_method;  // sorted by method
    std::string allow;                                     // "GET, POST"
  };

  ServerOptions options;
  // Immutable while running; a handful of entries, so a linear scan beats hashing.
  std::vector<PathRoutes> routes;

  const PathRoutes* FindPath(std::string_view path) const {
    for (const PathRoutes& entry : routes) {
      if (entry.path == path) return &entry;
    }
    return nullptr;
  }
  mg_context* ctx = nullptr;
  uint16_t port = 0;

  static int OnBeginRequest(mg_connection* conn) {
    auto* self = static_cast<Impl*>(mg_get_user_data(mg_get_context(conn)));
    return self->Serve(conn);
  }

  static int OnLogMessage(const mg_connection*, const char*) { return 1; }  // quiet

  int Serve(mg_connection* conn);
  static void Send(mg_connection* conn, const Response& response, bool close);
};

void Server::Impl::Send(mg_connection* conn, const Response& response, bool close) {
  thread_local std::string out;
  out.clear();
  strings::Append(&out, "HTTP/1.1 ", response.status, " ", StatusText(response.status),
                  "\r\nContent-Type: ", response.content_type,
                  "\r\nContent-Length: ", response.body.size(), "\r\n");
  for (const auto& [name, value] : response.headers)
    strings::Append(&out, name, ": ", value, "\r\n");
  if (close) {
    out.append("Connection: close\r\n");
    mg_disable_keep_alive(conn);
  }
  out.append("\r\n");
  out.append(response.body);
  mg_write(conn, out.data(), out.size());
}

int Server::Impl::Serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  Request request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "/";
  request.query = info->query_string != nullptr ? info->query_string : "";
  request.internal_headers = info->http_headers;
  request.internal_num_headers = info->num_headers;

  thread_local Response response;
  response.status = 200;
  response.content_type = "application/json";
  response.body.clear();
  response.headers.clear();

  const PathRoutes* path_routes = FindPath(request.path);
  if (path_routes == nullptr) {
    SetError(response, 404, Cat("no such endpoint: ", request.path));
    Send(conn, response, false);
    return 404;
  }
  const Route* found = nullptr;
  for (const auto& [method, route] : path_routes->by_method) {
    if (method == request.method) found = &route;
  }
  if (found == nullptr) {
    SetError(response, 405,
             Cat("method ", request.method, " not allowed on ", request.path,
                 " (allowed: ", path_routes->allow, ")"));
    response.headers.emplace_back("Allow", path_routes->allow);
    Send(conn, response, false);
    return 405;
  }
  const Route& route = *found;
  if (!options.bearer_token.empty() && !route.options.open) {
    std::string_view auth = request.Header("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok = auth.size() > kBearer.size() &&
                    strncasecmp(auth.data(), kBearer.data(), kBearer.size()) == 0 &&
                    TokenEquals(strings::Trim(auth.substr(kBearer.size())), options.bearer_token);
    if (!ok) {
      SetError(response, 401, "missing or wrong bearer token (Authorization: Bearer <token>)");
      response.headers.emplace_back("WWW-Authenticate", "Bearer");
      Send(conn, response, false);
      return 401;
    }
  }

  // The body, bounded before anything is read. The per-thread buffer grows
  // geometrically and is never zero-filled (only the padding is).
  thread_local BodyBuffer body;
  const long long declared = info->content_length;
  const bool chunked = declared < 0 && [&] {
    std::string_view te = request.Header("Transfer-Encoding");
    return te.size() >= 7 && strncasecmp(te.data(), "chunked", 7) == 0;
  }();
  size_t have = 0;
  if (declared > 0 || chunked) {
    if (declared > static_cast<long long>(options.max_body_bytes)) {
      SetError(response, 413,
               Cat("request body of ", declared, " bytes exceeds the limit of ",
                   options.max_body_bytes, " bytes"));
      Send(conn, response, true);
      return 413;
    }
    const size_t want = declared > 0 ? static_cast<size_t>(declared) : options.max_body_bytes + 1;
    body.Reserve(std::min(want, size_t{1} << 16));
    while (have < want) {
      if (body.capacity == have) body.Reserve(std::min(want, have * 2));
      const size_t room = std::min(want, body.capacity) - have;
      const int n = mg_read(conn, body.data.get() + have, room);
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    if (have > options.max_body_bytes) {
      SetError(response, 413,
               Cat("request body exceeds the limit of ", options.max_body_bytes, " bytes"));
      Send(conn, response, true);
      return 413;
    }
    if (declared > 0 && have < static_cast<size_t>(declared)) {
      SetError(response, 400,
               Cat("request body truncated: got ", have, " of ", declared, " bytes"));
      Send(conn, response, true);
      return 400;
    }
  } else {
    body.Reserve(0);
  }
  std::memset(body.data.get() + have, 0, kBodyPadding);
  request.body = std::string_view(body.data.get(), have);

  route.handler(request, response);
  Send(conn, response, false);
  return response.status;
}

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

Server::~Server() { Stop(); }

void Server::Handle(std::string_view method, std::string_view path, Handler handler,
                    RouteOptions route_options) {
  auto* entry = const_cast<Impl::PathRoutes*>(impl_->FindPath(path));
  if (entry == nullptr) {
    impl_->routes.push_back(Impl::PathRoutes{std::string(path), {}, {}});
    entry = &impl_->routes.back();
  }
  auto& methods = entry->by_method;
  auto it = std::find_if(methods.begin(), methods.end(),
                         [&](const auto& m) { return m.first == method; });
  if (it != methods.end()) {
    it->second = Impl::Route{std::move(handler), route_options};
  } else {
    methods.emplace_back(std::string(method), Impl::Route{std::move(handler), route_options});
    std::sort(methods.begin(), methods.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  entry->allow.clear();
  for (const auto& [m, unused] : methods) {
    if (!entry->allow.empty()) entry->allow.append(", ");
    entry->allow.append(m);
  }
}

Status Server::Start() {
  if (impl_->ctx != nullptr) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(impl_->options.Validate());
  std::call_once(g_init_once, [] { mg_init_library(0); });

  std::string listen = impl_->options.listen;
  // civetweb spells "host:port" for IPv4; IPv6 literals as "[addr]:port".
  const std::string threads = std::to_string(impl_->options.threads);
  const std::string timeout = std::to_string(impl_->options.request_timeout_ms);
  const std::string queue = std::to_string(std::max<uint32_t>(impl_->options.threads * 2, 64));
  const char* cv_options[] = {"listening_ports",
                              listen.c_str(),
                              "num_threads",
                              threads.c_str(),
                              "enable_keep_alive",
                              "yes",
                              "keep_alive_timeout_ms",
                              timeout.c_str(),
                              "request_timeout_ms",
                              timeout.c_str(),
                              "tcp_nodelay",
                              "1",
                              "connection_queue",
                              queue.c_str(),
                              "listen_backlog",
                              "1024",
                              nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &Impl::OnBeginRequest;
  callbacks.log_message = &Impl::OnLogMessage;

  char error_text[256] = {0};
  mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = impl_.get();
  init.configuration_options = cv_options;
  mg_error_data error;
  std::memset(&error, 0, sizeof(error));
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  mg_context* ctx = mg_start2(&init, &error);
  if (ctx == nullptr) {
    return absl::UnavailableError(Cat("http: cannot listen on ", impl_->options.listen, ": ",
                                      error_text[0] ? error_text : "start failed"));
  }
  mg_server_port ports[4];
  std::memset(ports, 0, sizeof(ports));
  const int n = mg_get_server_ports(ctx, 4, ports);
  impl_->port = n > 0 ? static_cast<uint16_t>(ports[0].port) : 0;
  impl_->ctx = ctx;
  return absl::OkStatus();
}

void Server::Stop() {
  if (impl_ == nullptr || impl_->ctx == nullptr) return;
  mg_stop(impl_->ctx);
  impl_->ctx = nullptr;
  impl_->port = 0;
}

bool Server::running() const { return impl_->ctx != nullptr; }

uint16_t Server::port() const { return impl_->port; }

}  // namespace kvindex::http
