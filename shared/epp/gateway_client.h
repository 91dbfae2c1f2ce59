// GatewayStream: the gateway side of Envoy's ext_proc for one HTTP request,
// as the Gateway API Inference Extension drives an endpoint picker in its
// FULL_DUPLEX_STREAMED mode (docs/epp.md, "Protocol"): request headers, the
// body in messages of at most 64 KiB (end_of_stream on the last), then the
// answers: the headers' answer carrying the pick (header mutation
// x-gateway-destination-endpoint and dynamic metadata "envoy.lb"), or an
// ImmediateResponse; the body echoed back in chunks until end_of_stream.
// After the upstream answered, the response headers (with the served
// endpoint in metadata_context["envoy.lb"]) and body go through the same
// stream, as Envoy sends them. Used by kvindex-bench epp and by
// kvindex-mockengine --policy epp (the simulated gateway).
//
//   GatewayStream stream(stub.get());
//   StatusOr<GatewayPick> pick = stream.Request({.path = "/v1/completions", .body = body});
//   ... send pick->body to pick->endpoints[0] ...
//   KVINDEX_RETURN_IF_ERROR(stream.Response(200, pick->endpoints[0], answer_body));
//   KVINDEX_RETURN_IF_ERROR(stream.Finish());
//
// Thread safety: one GatewayStream per request and thread (the stub and its
// channel may be shared).
#pragma once

#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/base/status.h"

namespace kvindex::epp {

struct GatewayRequest {
  std::string path = "/v1/completions";  // :path
  std::string body;                      // the OpenAI JSON body
};

struct GatewayPick {
  // An ImmediateResponse's HTTP status (503, 429, 400, 413), 0 = none: then
  // there is no pick and the stream is over.
  int immediate_status = 0;
  // The header x-gateway-destination-endpoint split at commas: the pick,
  // then the fallbacks. Empty when the answer carried no such header.
  std::vector<std::string> endpoints;
  // The same value from dynamic_metadata["envoy.lb"] ("" = absent).
  std::string metadata_endpoints;
  bool clear_route_cache = false;
  // The body as the picker sent it back (what the gateway forwards).
  std::string body;
  double pick_s = 0;  // stream start -> the headers' answer (the pick)
};

class GatewayStream {
 public:
  explicit GatewayStream(envoy::service::ext_proc::v3::ExternalProcessor::Stub* stub,
                         std::chrono::milliseconds deadline = std::chrono::seconds(10));
  ~GatewayStream();
  GatewayStream(const GatewayStream&) = delete;
  GatewayStream& operator=(const GatewayStream&) = delete;

  // Sends the request's headers and body; reads the pick and the echoed
  // body. Internal error when the stream breaks or an answer is out of order.
  StatusOr<GatewayPick> Request(const GatewayRequest& request);
  // The upstream's answer: response headers with `served` (the endpoint
  // that answered) in metadata_context["envoy.lb"], then `body` as one
  // chunk with end_of_stream; reads both answers.
  Status Response(int status, std::string_view served, std::string_view body);
  // Half-closes and waits for the server to end the stream.
  Status Finish();

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<envoy::service::ext_proc::v3::ProcessingRequest,
                                           envoy::service::ext_proc::v3::ProcessingResponse>>
      stream_;
  bool finished_ = false;
};

}  // namespace kvindex::epp
