#include "services/bench/epp/pick_client.h"

#include <chrono>

#include "shared/epp/gateway_client.h"

namespace kvindex::bench {

PickClient::PickClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(envoy::service::ext_proc::v3::ExternalProcessor::NewStub(std::move(channel))) {}

StatusOr<PickTiming> PickClient::Pick(const std::string& body) {
  PickTiming timing;
  const auto t0 = std::chrono::steady_clock::now();
  epp::GatewayStream stream(stub_.get());
  StatusOr<epp::GatewayPick> pick = stream.Request({.path = "/v1/completions", .body = body});
  if (pick.ok()) {
    timing.latency_s = pick->pick_s;
    if (!pick->endpoints.empty()) timing.endpoint = pick->endpoints[0];
  }
  const Status finished = stream.Finish();
  timing.stream_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!pick.ok()) return pick.status();
  if (!finished.ok()) return finished;
  if (timing.endpoint.empty()) return absl::InternalError("ext_proc answer without a pick");
  return timing;
}

}  // namespace kvindex::bench
