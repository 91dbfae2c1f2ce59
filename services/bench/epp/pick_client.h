// PickClient: the gateway side of one ext_proc stream per request, as
// Envoy's ext_proc filter drives the endpoint picker in GAIE's
// FULL_DUPLEX_STREAMED mode: request headers, the body in messages of at
// most 64 KiB (end_of_stream on the last), then the answers: the headers'
// answer carrying the pick, the body echoed back in chunks until
// end_of_stream; then the client half-closes.
//
//   PickClient client(channel);
//   auto pick = client.Pick(body);   // pick->latency_s, pick->endpoint
//
// Thread safety: one PickClient per thread (the channel may be shared).
#pragma once

#include <grpcpp/channel.h>

#include <memory>
#include <string>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/base/status.h"

namespace kvindex::bench {

struct PickTiming {
  double latency_s = 0;  // stream start -> the pick received
  double stream_s = 0;   // stream start -> the stream finished
  std::string endpoint;  // the pick (first address of the header)
};

class PickClient {
 public:
  explicit PickClient(std::shared_ptr<grpc::Channel> channel);

  // One request with this OpenAI JSON body. Internal error when the stream
  // fails or the answer carries no pick.
  StatusOr<PickTiming> Pick(const std::string& body);

 private:
  std::unique_ptr<envoy::service::ext_proc::v3::ExternalProcessor::Stub> stub_;
  envoy::service::ext_proc::v3::ProcessingRequest headers_;
};

}  // namespace kvindex::bench
