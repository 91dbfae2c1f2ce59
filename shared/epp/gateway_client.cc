#include "shared/epp/gateway_client.h"

#include <algorithm>

namespace kvindex::epp {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;
// Envoy's ext_proc filter sends a streamed body in messages of at most this.
constexpr size_t kBodyMessageBytes = 64 << 10;
constexpr char kDestination[] = "x-gateway-destination-endpoint";
constexpr char kDestinationNamespace[] = "envoy.lb";
constexpr char kServed[] = "x-gateway-destination-endpoint-served";

void AddHeader(envoy::config::core::v3::HeaderMap* map, std::string_view key,
               std::string_view value) {
  auto* h = map->add_headers();
  h->set_key(std::string(key));
  h->set_raw_value(std::string(value));
}

std::vector<std::string> SplitCommas(std::string_view value) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin <= value.size();) {
    size_t comma = value.find(',', begin);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = value.substr(begin, comma - begin);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    begin = comma + 1;
  }
  return out;
}

}  // namespace

GatewayStream::GatewayStream(pb::ExternalProcessor::Stub* stub,
                             std::chrono::milliseconds deadline) {
  context_.set_deadline(std::chrono::system_clock::now() + deadline);
  stream_ = stub->Process(&context_);
}

GatewayStream::~GatewayStream() {
  if (!finished_) {
    context_.TryCancel();
    (void)stream_->Finish();
  }
}

StatusOr<GatewayPick> GatewayStream::Request(const GatewayRequest& request) {
  GatewayPick pick;
  const auto t0 = Clock::now();
  pb::ProcessingRequest headers;
  auto* map = headers.mutable_request_headers()->mutable_headers();
  AddHeader(map, ":method", "POST");
  AddHeader(map, ":path", request.path);
  AddHeader(map, ":authority", "gateway");
  AddHeader(map, "content-type", "application/json");
  AddHeader(map, "content-length", std::to_string(request.body.size()));
  headers.mutable_request_headers()->set_end_of_stream(request.body.empty());
  bool ok = stream_->Write(headers);
  pb::ProcessingRequest chunk;
  for (size_t offset = 0; ok && offset < request.body.size(); offset += kBodyMessageBytes) {
    const size_t n = std::min(kBodyMessageBytes, request.body.size() - offset);
    chunk.mutable_request_body()->set_body(request.body.data() + offset, n);
    chunk.mutable_request_body()->set_end_of_stream(offset + n == request.body.size());
    ok = stream_->Write(chunk);
  }
  pb::ProcessingResponse response;
  if (!ok || !stream_->Read(&response)) {
    return absl::InternalError("ext_proc stream broke before the pick");
  }
  pick.pick_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (response.has_immediate_response()) {
    pick.immediate_status = static_cast<int>(response.immediate_response().status().code());
    pick.body = response.immediate_response().body();
    return pick;
  }
  if (!response.has_request_headers()) {
    return absl::InternalError("ext_proc: the first answer is not the request headers'");
  }
  const pb::CommonResponse& common = response.request_headers().response();
  pick.clear_route_cache = common.clear_route_cache();
  for (const auto& h : common.header_mutation().set_headers()) {
    if (h.header().key() == kDestination) pick.endpoints = SplitCommas(h.header().raw_value());
  }
  if (auto ns = response.dynamic_metadata().fields().find(kDestinationNamespace);
      ns != response.dynamic_metadata().fields().end() && ns->second.has_struct_value()) {
    const auto& fields = ns->second.struct_value().fields();
    if (auto f = fields.find(kDestination); f != fields.end() && f->second.has_string_value()) {
      pick.metadata_endpoints = f->second.string_value();
    }
  }
  // The echoed body, up to its end.
  while (!request.body.empty()) {
    if (!stream_->Read(&response) || !response.has_request_body()) {
      return absl::InternalError("ext_proc: the request body was not echoed to its end");
    }
    const auto& mutation = response.request_body().response().body_mutation();
    pick.body += mutation.streamed_response().body();
    if (mutation.streamed_response().end_of_stream()) break;
  }
  return pick;
}

Status GatewayStream::Response(int status, std::string_view served, std::string_view body) {
  pb::ProcessingRequest headers;
  auto* map = headers.mutable_response_headers()->mutable_headers();
  AddHeader(map, ":status", std::to_string(status));
  AddHeader(map, "content-type", "application/json");
  headers.mutable_response_headers()->set_end_of_stream(body.empty());
  google::protobuf::Value value;
  value.set_string_value(std::string(served));
  (*(*headers.mutable_metadata_context()->mutable_filter_metadata())[kDestinationNamespace]
        .mutable_fields())[kServed] = value;
  pb::ProcessingResponse response;
  if (!stream_->Write(headers) || !stream_->Read(&response) || !response.has_response_headers()) {
    return absl::InternalError("ext_proc: the response headers were not answered");
  }
  if (body.empty()) return absl::OkStatus();
  pb::ProcessingRequest chunk;
  chunk.mutable_response_body()->set_body(std::string(body));
  chunk.mutable_response_body()->set_end_of_stream(true);
  if (!stream_->Write(chunk)) return absl::InternalError("ext_proc: response body not sent");
  // Echoed in chunks up to end_of_stream (FULL_DUPLEX_STREAMED), or one
  // plain answer (another response mode).
  while (stream_->Read(&response)) {
    if (!response.has_response_body()) break;
    const auto& mutation = response.response_body().response().body_mutation();
    if (!mutation.has_streamed_response() || mutation.streamed_response().end_of_stream()) {
      return absl::OkStatus();
    }
  }
  return absl::InternalError("ext_proc: the response body was not answered");
}

Status GatewayStream::Finish() {
  stream_->WritesDone();
  const grpc::Status status = stream_->Finish();
  finished_ = true;
  if (!status.ok()) return absl::InternalError("ext_proc stream: " + status.error_message());
  return absl::OkStatus();
}

}  // namespace kvindex::epp
