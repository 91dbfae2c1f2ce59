#include "services/mockengine/epp_gateway.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <charconv>
#include <chrono>

#include "services/mockengine/engine_http.h"
#include "shared/epp/gateway_client.h"
#include "shared/http/client.h"

namespace kvindex::mockengine {

EppGateway::EppGateway(const std::string& epp_address)
    : stub_(envoy::service::ext_proc::v3::ExternalProcessor::NewStub(
          grpc::CreateChannel(epp_address, grpc::InsecureChannelCredentials()))) {}

StatusOr<EppRoute> EppGateway::Route(std::string_view model, std::span<const uint32_t> tokens,
                                     uint32_t max_tokens, uint64_t request) {
  // A token-id prompt: the picker needs no tokenizer.
  body_ = "{\"model\":\"";
  AppendJsonEscaped(model, &body_);
  body_ += "\",\"prompt\":[";
  char number[16];
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) body_.push_back(',');
    body_.append(number, std::to_chars(number, number + sizeof(number), tokens[i]).ptr);
  }
  body_ += "],\"max_tokens\":" + std::to_string(max_tokens) + "}";

  EppRoute route;
  epp::GatewayStream stream(stub_.get());
  KVINDEX_ASSIGN_OR_RETURN(epp::GatewayPick pick,
                           stream.Request({.path = "/v1/completions", .body = body_}));
  route.pick_us = pick.pick_s * 1e6;
  if (pick.immediate_status != 0) {
    (void)stream.Finish();
    const std::string what =
        "the picker answered " + std::to_string(pick.immediate_status) + ": " + pick.body;
    if (pick.immediate_status == 503) return absl::UnavailableError(what);
    if (pick.immediate_status == 429) return absl::ResourceExhaustedError(what);
    return absl::InvalidArgumentError(what);
  }
  if (pick.endpoints.empty()) return absl::InternalError("the picker's answer carries no pick");
  std::string joined;
  for (const std::string& e : pick.endpoints) joined += (joined.empty() ? "" : ",") + e;
  if (pick.metadata_endpoints != joined) {
    return absl::InternalError("pick header '" + joined + "' != envoy.lb metadata '" +
                               pick.metadata_endpoints + "'");
  }
  route.picked = std::move(pick.endpoints);

  // To the pick; a fallback only when the pick refuses the connection.
  StatusOr<http::ClientResponse> reply = absl::UnavailableError("no endpoint");
  for (const std::string& endpoint : route.picked) {
    StatusOr<http::Url> url = http::ParseUrl(endpoint);
    if (!url.ok()) return absl::InternalError("picked endpoint '" + endpoint + "' is no address");
    http::ClientRequest forward;
    forward.method = "POST";
    forward.url = *url;
    forward.path = "/v1/completions";
    forward.body = pick.body;
    forward.headers.emplace_back(kRequestHeader, std::to_string(request));
    forward.timeout = std::chrono::milliseconds(2000);
    reply = http::Fetch(forward);
    if (reply.ok()) {
      route.served = endpoint;
      break;
    }
  }
  if (!reply.ok()) {
    return absl::UnavailableError("no picked endpoint answered: " + reply.status().ToString());
  }
  KVINDEX_RETURN_IF_ERROR(stream.Response(reply->status, route.served, reply->body));
  KVINDEX_RETURN_IF_ERROR(stream.Finish());
  if (reply->status != 200) {
    return absl::FailedPreconditionError("engine " + route.served + " answered " +
                                         std::to_string(reply->status) + ": " + reply->body);
  }
  return route;
}

}  // namespace kvindex::mockengine
