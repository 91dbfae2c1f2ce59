// The former thread-per-connection backend (civetweb), kept beside the event
// loop for the benchmark comparison (docs/benchmarks.md, "HTTP"); select it
// with ServerOptions::backend = Backend::kThreadPerConnection.
//
// Requests are taken in civetweb's begin_request callback, before civetweb's
// own URI handling (no document root, no file serving), and the whole
// response (status line, headers, body) goes out in one mg_write.
#include <civetweb.h>
#include <strings.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "shared/base/strings.h"
#include "shared/http/internal/backend.h"

namespace kvindex::http::internal {
namespace {

using strings::Cat;

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

std::string_view LookupHeader(const void* headers, std::string_view name) {
  const auto* info = static_cast<const mg_request_info*>(headers);
  for (int i = 0; i < info->num_headers; ++i) {
    const char* key = info->http_headers[i].name;
    if (key != nullptr && std::strlen(key) == name.size() &&
        strncasecmp(key, name.data(), name.size()) == 0) {
      const char* value = info->http_headers[i].value;
      return value != nullptr ? std::string_view(value) : std::string_view();
    }
  }
  return {};
}

class CivetwebBackend final : public ServerBackend {
 public:
  CivetwebBackend(const ServerOptions& options, const RouteTable& routes)
      : options_(options), routes_(routes) {}
  ~CivetwebBackend() override { Stop(); }

  Status Start() override;
  void Stop() override;
  uint16_t port() const override { return port_; }

 private:
  static int OnBeginRequest(mg_connection* conn) {
    auto* self = static_cast<CivetwebBackend*>(mg_get_user_data(mg_get_context(conn)));
    return self->Serve(conn);
  }
  static int OnLogMessage(const mg_connection*, const char*) { return 1; }  // quiet

  int Serve(mg_connection* conn);
  static void Send(mg_connection* conn, const Response& response, bool close, bool head_only);

  const ServerOptions& options_;
  const RouteTable& routes_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
};

void CivetwebBackend::Send(mg_connection* conn, const Response& response, bool close,
                           bool head_only) {
  thread_local std::string out;
  out.clear();
  AppendResponse(response, close, head_only, &out);
  if (close) mg_disable_keep_alive(conn);
  mg_write(conn, out.data(), out.size());
}

int CivetwebBackend::Serve(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  Request request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "/";
  request.query = info->query_string != nullptr ? info->query_string : "";
  request.internal_headers = info;
  request.internal_lookup = &LookupHeader;

  thread_local Response response;
  response.status = 200;
  response.content_type = "application/json";
  response.body.clear();
  response.headers.clear();

  const RouteDecision decision = Decide(routes_, options_.bearer_token, request.method,
                                        request.path, request.Header("Authorization"), response);
  if (decision.route == nullptr) {
    Send(conn, response, false, false);
    return response.status;
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
    if (declared > static_cast<long long>(options_.max_body_bytes)) {
      SetError(response, 413,
               Cat("request body of ", declared, " bytes exceeds the limit of ",
                   options_.max_body_bytes, " bytes"));
      Send(conn, response, true, false);
      return 413;
    }
    const size_t want = declared > 0 ? static_cast<size_t>(declared) : options_.max_body_bytes + 1;
    body.Reserve(std::min(want, size_t{1} << 16));
    while (have < want) {
      if (body.capacity == have) body.Reserve(std::min(want, have * 2));
      const size_t room = std::min(want, body.capacity) - have;
      const int n = mg_read(conn, body.data.get() + have, room);
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    if (have > options_.max_body_bytes) {
      SetError(response, 413,
               Cat("request body exceeds the limit of ", options_.max_body_bytes, " bytes"));
      Send(conn, response, true, false);
      return 413;
    }
    if (declared > 0 && have < static_cast<size_t>(declared)) {
      SetError(response, 400,
               Cat("request body truncated: got ", have, " of ", declared, " bytes"));
      Send(conn, response, true, false);
      return 400;
    }
  } else {
    body.Reserve(0);
  }
  std::memset(body.data.get() + have, 0, kBodyPadding);
  request.body = std::string_view(body.data.get(), have);

  decision.route->handler(request, response);
  Send(conn, response, false, decision.head_only);
  return response.status;
}

Status CivetwebBackend::Start() {
  if (ctx_ != nullptr) return absl::OkStatus();
  std::call_once(g_init_once, [] { mg_init_library(0); });

  // civetweb spells "host:port" for IPv4; IPv6 literals as "[addr]:port".
  std::string listen = options_.listen;
  const std::string threads = std::to_string(options_.threads);
  const std::string timeout = std::to_string(options_.body_timeout_ms);
  const std::string queue = std::to_string(std::max<uint32_t>(options_.threads * 2, 64));
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
  callbacks.begin_request = &CivetwebBackend::OnBeginRequest;
  callbacks.log_message = &CivetwebBackend::OnLogMessage;

  char error_text[256] = {0};
  mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = this;
  init.configuration_options = cv_options;
  mg_error_data error;
  std::memset(&error, 0, sizeof(error));
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);
  mg_context* ctx = mg_start2(&init, &error);
  if (ctx == nullptr) {
    return absl::UnavailableError(Cat("http: cannot listen on ", options_.listen, ": ",
                                      error_text[0] ? error_text : "start failed"));
  }
  mg_server_port ports[4];
  std::memset(ports, 0, sizeof(ports));
  const int n = mg_get_server_ports(ctx, 4, ports);
  port_ = n > 0 ? static_cast<uint16_t>(ports[0].port) : 0;
  ctx_ = ctx;
  return absl::OkStatus();
}

void CivetwebBackend::Stop() {
  if (ctx_ == nullptr) return;
  mg_stop(ctx_);
  ctx_ = nullptr;
  port_ = 0;
}

}  // namespace

std::unique_ptr<ServerBackend> MakeThreadPerConnectionBackend(const ServerOptions& options,
                                                              const RouteTable& routes) {
  return std::make_unique<CivetwebBackend>(options, routes);
}

}  // namespace kvindex::http::internal
