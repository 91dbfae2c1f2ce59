// An ext_proc stream in memory, for driving ExtProcService::Serve without
// gRPC (the unit test and tests/fuzz/ext_proc_fuzz): Read hands out the
// given requests in order, then reports the end of the stream; Write keeps
// every answer.
#pragma once

#include <grpcpp/support/sync_stream.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.pb.h"

namespace kvindex::epp::testing {

class MemoryStream final
    : public grpc::ServerReaderWriterInterface<envoy::service::ext_proc::v3::ProcessingResponse,
                                               envoy::service::ext_proc::v3::ProcessingRequest> {
 public:
  using Request = envoy::service::ext_proc::v3::ProcessingRequest;
  using Response = envoy::service::ext_proc::v3::ProcessingResponse;

  explicit MemoryStream(std::vector<Request> requests) : requests_(std::move(requests)) {}
  void SendInitialMetadata() override {}
  bool NextMessageSize(uint32_t* size) override {
    *size = next_ < requests_.size() ? static_cast<uint32_t>(requests_[next_].ByteSizeLong()) : 0;
    return next_ < requests_.size();
  }
  bool Read(Request* message) override {
    if (next_ >= requests_.size()) return false;
    *message = requests_[next_++];
    return true;
  }
  bool Write(const Response& message, grpc::WriteOptions) override {
    answers.push_back(message);
    return true;
  }

  std::vector<Response> answers;

 private:
  std::vector<Request> requests_;
  size_t next_ = 0;
};

}  // namespace kvindex::epp::testing
