// PickClient: one ext_proc stream per request through the shared gateway
// side (shared/epp/gateway_client.h): request headers and body, the pick
// and the echoed body; then the client half-closes.
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
};

}  // namespace kvindex::bench
