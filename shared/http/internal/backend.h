// The two server backends behind http::Server (server.h). Internal.
#pragma once

#include <cstdint>
#include <memory>

#include "shared/base/status.h"
#include "shared/http/internal/routes.h"
#include "shared/http/server.h"

namespace kvindex::http::internal {

class ServerBackend {
 public:
  virtual ~ServerBackend() = default;
  // Binds and starts serving; the options were validated.
  virtual Status Start() = 0;
  // Stops accepting, ends the connections, joins the threads. Idempotent.
  virtual void Stop() = 0;
  virtual uint16_t port() const = 0;
};

// `options` and `routes` outlive the backend.
std::unique_ptr<ServerBackend> MakeEventLoopBackend(const ServerOptions& options,
                                                    const RouteTable& routes);
std::unique_ptr<ServerBackend> MakeThreadPerConnectionBackend(const ServerOptions& options,
                                                              const RouteTable& routes);

}  // namespace kvindex::http::internal
