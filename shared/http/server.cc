// http::Server: the route table, option checks and the choice of backend
// (server_event_loop.cc by default, server_civetweb.cc for comparison).
#include "shared/http/server.h"

#include <arpa/inet.h>

#include <string>

#include "shared/base/strings.h"
#include "shared/http/internal/backend.h"
#include "shared/http/internal/routes.h"

namespace kvindex::http {
namespace {

using strings::Cat;

// The host part of a listen address: an IPv4 literal, "[IPv6]" or
// "localhost". Checked here so a typo fails at start (inet_pton refuses
// "999.1.1.1", which civetweb bound as 231.1.1.1).
bool ValidHost(std::string_view host) {
  if (host == "localhost") return true;
  unsigned char address[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    const std::string literal(host.substr(1, host.size() - 2));
    return inet_pton(AF_INET6, literal.c_str(), address) == 1;
  }
  const std::string literal(host);
  return inet_pton(AF_INET, literal.c_str(), address) == 1;
}

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
  return internal_lookup != nullptr ? internal_lookup(internal_headers, name) : std::string_view();
}

Status ServerOptions::Validate() const {
  if (listen.empty()) return absl::InvalidArgumentError("http: listen address is empty");
  const size_t colon = listen.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos ||
      !strings::ParseUnsigned(std::string_view(listen).substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(Cat("http: listen address '", listen, "' is not host:port"));
  }
  if (!ValidHost(std::string_view(listen).substr(0, colon))) {
    return absl::InvalidArgumentError(
        Cat("http: listen address '", listen,
            "': the host must be an IPv4 address, [IPv6 address] or localhost"));
  }
  if (threads == 0 || threads > 4096) {
    return absl::InvalidArgumentError(Cat("http: threads must be in [1, 4096], got ", threads));
  }
  if (max_body_bytes == 0) return absl::InvalidArgumentError("http: max_body_bytes must be > 0");
  if (max_connections == 0) return absl::InvalidArgumentError("http: max_connections must be > 0");
  if (max_body_total_bytes < max_body_bytes) {
    return absl::InvalidArgumentError(Cat("http: max_body_total_bytes (", max_body_total_bytes,
                                          ") must be at least max_body_bytes (", max_body_bytes,
                                          ")"));
  }
  if (idle_timeout_ms == 0 || header_timeout_ms == 0 || body_timeout_ms == 0) {
    return absl::InvalidArgumentError("http: the idle, header and body timeouts must be > 0");
  }
  return absl::OkStatus();
}

struct Server::Impl {
  ServerOptions options;
  internal::RouteTable routes;
  std::unique_ptr<internal::ServerBackend> backend;
  bool running = false;
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

Server::~Server() { Stop(); }

void Server::Handle(std::string_view method, std::string_view path, Handler handler,
                    RouteOptions route_options) {
  impl_->routes.Add(method, path, std::move(handler), route_options);
}

Status Server::Start() {
  if (impl_->running) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(impl_->options.Validate());
  impl_->backend.reset();
  impl_->backend = impl_->options.backend == Backend::kEventLoop
                       ? internal::MakeEventLoopBackend(impl_->options, impl_->routes)
                       : internal::MakeThreadPerConnectionBackend(impl_->options, impl_->routes);
  KVINDEX_RETURN_IF_ERROR(impl_->backend->Start());
  impl_->running = true;
  return absl::OkStatus();
}

void Server::Stop() {
  if (impl_ == nullptr || !impl_->running) return;
  impl_->backend->Stop();
  impl_->running = false;
}

bool Server::running() const { return impl_->running; }

uint16_t Server::port() const { return impl_->running ? impl_->backend->port() : 0; }

}  // namespace kvindex::http
