#include "shared/epp/health_service.h"

#include <chrono>
#include <thread>

namespace kvindex::epp {

using grpc::health::v1::HealthCheckResponse;

HealthCheckResponse::ServingStatus HealthService::StatusOf(const std::string& service) const {
  if (service == "liveness") return HealthCheckResponse::SERVING;
  if (service.empty() || service == "readiness" ||
      service == "envoy.service.ext_proc.v3.ExternalProcessor") {
    return !shutdown_.load() && ready_() ? HealthCheckResponse::SERVING
                                         : HealthCheckResponse::NOT_SERVING;
  }
  return HealthCheckResponse::SERVICE_UNKNOWN;
}

grpc::Status HealthService::Check(grpc::ServerContext* /*context*/,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  const HealthCheckResponse::ServingStatus status = StatusOf(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(grpc::ServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::ServerWriter<HealthCheckResponse>* writer) {
  bool first = true;
  HealthCheckResponse::ServingStatus last = HealthCheckResponse::UNKNOWN;
  while (!context->IsCancelled() && !shutdown_.load()) {
    const HealthCheckResponse::ServingStatus status = StatusOf(request->service());
    if (first || status != last) {
      HealthCheckResponse response;
      response.set_status(status);
      if (!writer->Write(response)) break;
      first = false;
      last = status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return grpc::Status::OK;
}

}  // namespace kvindex::epp
