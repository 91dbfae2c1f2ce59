// EppGateway: the simulated gateway of kvindex-mockengine --policy epp
// (README.md, "Placement policies"). Each request goes through the
// router's ext_proc exactly as an Envoy-based GAIE gateway sends it
// (shared/epp/gateway_client.h: request headers, the body in
// FULL_DUPLEX_STREAMED, the pick read from the x-gateway-destination-endpoint
// header mutation, which must equal dynamic_metadata["envoy.lb"]); the
// echoed body is then POSTed to the picked engine's /v1/completions (a
// fallback only when the pick refuses the connection, as Envoy's
// ORIGINAL_DST does), and the engine's answer goes back through the stream
// with the endpoint that served it (x-gateway-destination-endpoint-served),
// which the router counts against its pick.
//
//   EppGateway gateway("127.0.0.1:9002");
//   StatusOr<EppRoute> route = gateway.Route("M", tokens, 128, request_number);
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/base/status.h"

namespace kvindex::mockengine {

struct EppRoute {
  std::vector<std::string> picked;  // the pick, then the fallbacks
  std::string served;               // the endpoint that answered
  double pick_us = 0;               // stream start -> the pick
};

class EppGateway {
 public:
  explicit EppGateway(const std::string& epp_address);

  // Unavailable / ResourceExhausted / InvalidArgument: the picker answered
  // 503 / 429 / 4xx instead of a pick; Internal: the stream broke, the
  // answer carried no pick, or header and metadata disagree; Unavailable:
  // no picked endpoint answered; FailedPrecondition: the engine refused
  // the request (its status in the message).
  StatusOr<EppRoute> Route(std::string_view model, std::span<const uint32_t> tokens,
                           uint32_t max_tokens, uint64_t request);

 private:
  std::unique_ptr<envoy::service::ext_proc::v3::ExternalProcessor::Stub> stub_;
  std::string body_;  // scratch
};

}  // namespace kvindex::mockengine
