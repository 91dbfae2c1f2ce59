// HealthService: grpc.health.v1.Health for the endpoint picker (docs/epp.md,
// "Health"): "liveness" is SERVING while the process runs; "",
// "envoy.service.ext_proc.v3.ExternalProcessor" and "readiness" are SERVING
// when `ready()` says so (the router's /readyz); any other service is
// NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch). Watch sends the status, then
// every change (polled each 100 ms) until the client cancels or Shutdown.
//
// Thread safety: called concurrently from gRPC threads; `ready` must be
// callable from any thread.
#pragma once

#include <atomic>
#include <functional>

#include "grpc/health/v1/health.grpc.pb.h"

namespace kvindex::epp {

class HealthService final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthService(std::function<bool()> ready) : ready_(std::move(ready)) {}

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  // Ends open Watch streams (before the servers shut down).
  void Shutdown() { shutdown_.store(true); }

 private:
  // SERVICE_UNKNOWN for an unknown service.
  grpc::health::v1::HealthCheckResponse::ServingStatus StatusOf(const std::string& service) const;

  const std::function<bool()> ready_;
  std::atomic<bool> shutdown_{false};
};

}  // namespace kvindex::epp
