#include "services/bench/epp/pick_client.h"

#include <grpcpp/client_context.h>

#include <algorithm>
#include <chrono>

#include "services/bench/epp/pick_loop.h"

namespace kvindex::bench {
namespace {

namespace pb = envoy::service::ext_proc::v3;
using Clock = std::chrono::steady_clock;

}  // namespace

PickClient::PickClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(pb::ExternalProcessor::NewStub(std::move(channel))),
      headers_(BuildPickRequests("").messages[0]) {}

StatusOr<PickTiming> PickClient::Pick(const std::string& body) {
  PickTiming timing;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const auto t0 = Clock::now();
  auto stream = stub_->Process(&context);
  bool ok = stream->Write(headers_);
  pb::ProcessingRequest chunk;
  for (size_t offset = 0; ok && offset < body.size(); offset += kBodyMessageBytes) {
    const size_t n = std::min(kBodyMessageBytes, body.size() - offset);
    chunk.mutable_request_body()->set_body(body.data() + offset, n);
    chunk.mutable_request_body()->set_end_of_stream(offset + n == body.size());
    ok = stream->Write(chunk);
  }
  pb::ProcessingResponse response;
  if (ok && stream->Read(&response)) {
    timing.latency_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (response.has_request_headers()) {
      for (const auto& h : response.request_headers().response().header_mutation().set_headers()) {
        if (h.header().key() == kDestination) {
          const std::string& value = h.header().raw_value();
          timing.endpoint = value.substr(0, value.find(','));
        }
      }
    }
    // The echoed body, up to its end.
    while (stream->Read(&response)) {
      if (!response.has_request_body()) break;
      const auto& mutation = response.request_body().response().body_mutation();
      if (mutation.streamed_response().end_of_stream()) break;
    }
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  timing.stream_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!status.ok()) return absl::InternalError("ext_proc stream: " + status.error_message());
  if (timing.endpoint.empty()) return absl::InternalError("ext_proc answer without a pick");
  return timing;
}

}  // namespace kvindex::bench
