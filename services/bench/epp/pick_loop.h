// PickLoop: closed-loop gateways on gRPC's callback API, without a thread
// per stream: `streams` ext_proc streams in flight at once, each one a
// request as Envoy's ext_proc filter sends it in FULL_DUPLEX_STREAMED mode
// (request headers, the body in messages of at most 64 KiB, end_of_stream
// on the last), reading the pick (the headers' answer) and the echoed body
// to its end, then half-closing. When a stream ends, the next one starts
// on the same channel, until Stop.
//
//   PickLoop loop(channels, bodies, 16);   // starts
//   sleep ...
//   PickLoop::Result r = loop.Stop();      // latencies of completed picks
//
// The requests are built once per body (PickRequests) and shared by every
// stream: the client serializes them, it does not copy them.
//
// Thread safety: the constructor and Stop from one thread; streams run on
// gRPC's threads.
#pragma once

#include <grpcpp/channel.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/base/mutex.h"

namespace kvindex::bench {

// Envoy's body messages are at most this large.
inline constexpr size_t kBodyMessageBytes = 64 << 10;
inline constexpr char kDestination[] = "x-gateway-destination-endpoint";

// The messages of one request (as PickClient sends them too): headers, then
// the body's messages (none for an empty body).
struct PickRequests {
  std::vector<envoy::service::ext_proc::v3::ProcessingRequest> messages;
};
PickRequests BuildPickRequests(const std::string& body);

class PickLoop {
 public:
  struct Result {
    std::vector<double> latency_s;  // stream start -> the pick received
    std::vector<double> stream_s;   // stream start -> the stream finished
    uint64_t errors = 0;            // failed streams, answers without a pick
  };

  PickLoop(std::vector<std::shared_ptr<grpc::Channel>> channels,
           const std::vector<PickRequests>* requests, uint32_t streams);
  ~PickLoop();
  PickLoop(const PickLoop&) = delete;
  PickLoop& operator=(const PickLoop&) = delete;

  // Lets the streams in flight end, starts no more, returns what ended.
  Result Stop();

 private:
  class Stream;
  void Start(uint32_t slot);
  void Ended(uint32_t slot, double latency_s, double stream_s, bool ok);

  std::vector<std::unique_ptr<envoy::service::ext_proc::v3::ExternalProcessor::Stub>> stubs_;
  const std::vector<PickRequests>* const requests_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_{0};
  Mutex mu_;
  CondVar idle_;
  uint32_t active_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  Result result_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::bench
