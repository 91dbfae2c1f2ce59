// ExtProcService: envoy.service.ext_proc.v3.ExternalProcessor/Process as the
// Gateway API Inference Extension's endpoint picker protocol defines it
// (docs/epp.md, "Protocol"). One bidirectional stream per HTTP request:
//
//   request_headers   answered at once when they end the request (no body:
//                     load-only pick) or in BUFFERED mode (empty answer, the
//                     pick rides on the body answer); otherwise deferred
//                     until the body decides (FULL_DUPLEX_STREAMED).
//   request_body      buffered up to max_body_bytes; at end_of_stream (or
//                     at the trailers): parse, tokens, pick, then the
//                     headers' answer with the pick and the body echoed in
//                     streamed_response chunks of at most 62,000 bytes.
//   request_trailers  decide if not yet, then answered.
//   response_*        passed through in order (streamed bodies echoed in
//                     chunks); the served endpoint (metadata "envoy.lb" /
//                     x-gateway-destination-endpoint-served) is counted.
//
// The pick: header x-gateway-destination-endpoint "pick,fallback,...", the
// same value in dynamic_metadata["envoy.lb"], clear_route_cache. No
// eligible endpoint: ImmediateResponse 503; every eligible endpoint at the
// configured in-flight limit: 429. A body that does not parse:
// load-only pick (fail open) or 400 (fail closed). Past max_body_bytes:
// load-only pick and the body passed through (open) or 413 (closed).
//
// Thread safety: Process runs concurrently on gRPC's threads; per-stream
// state is local; shared state is the picker's and atomic counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "shared/epp/picker.h"
#include "shared/epp/token_source.h"

namespace kvindex::epp {

// Largest body chunk sent back to Envoy (the GAIE EPP's limit).
inline constexpr size_t kMaxBodyChunkBytes = 62'000;

inline constexpr char kDestinationHeader[] = "x-gateway-destination-endpoint";
inline constexpr char kDestinationNamespace[] = "envoy.lb";
inline constexpr char kServedKey[] = "x-gateway-destination-endpoint-served";
inline constexpr char kSubsetNamespace[] = "envoy.lb.subset_hint";
inline constexpr char kSubsetKey[] = "x-gateway-destination-endpoint-subset";

struct ServiceOptions {
  // --epp-max-body-bytes. Default: 16 MiB.
  size_t max_body_bytes = size_t{16} << 20;
  // --epp-failure-mode open (true, default) or closed.
  bool fail_open = true;
};

// Counters (exported as kvindex_router_epp_* by EppServer).
struct ServiceCounters {
  enum End { kComplete, kImmediate, kCancelled, kNoBody, kOversize, kEmpty, kNumEnds };
  std::atomic<uint64_t> streams_ended[kNumEnds] = {};
  std::atomic<uint64_t> picks_prefix{0}, picks_load_only{0};
  std::atomic<uint64_t> immediate_400{0}, immediate_413{0}, immediate_429{0}, immediate_503{0};
  std::atomic<uint64_t> parse_failures{0}, token_failures{0}, oversize_passthrough{0};
  std::atomic<uint64_t> served_pick{0}, served_fallback{0}, served_other{0};
  std::atomic<int64_t> streams_open{0};
};

class ExtProcService final : public envoy::service::ext_proc::v3::ExternalProcessor::Service {
 public:
  ExtProcService(ServiceOptions options, Picker* picker, const TokenChain* tokens)
      : options_(options), picker_(picker), tokens_(tokens) {}

  grpc::Status Process(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<envoy::service::ext_proc::v3::ProcessingResponse,
                               envoy::service::ext_proc::v3::ProcessingRequest>* stream) override;

  // The per-stream state machine behind Process, over any reader-writer:
  // reads requests until the stream ends (or an immediate response ends the
  // exchange) and writes the answers. Process is this over gRPC's stream;
  // tests/fuzz/ext_proc_fuzz drives it without a network.
  void Serve(
      grpc::ServerReaderWriterInterface<envoy::service::ext_proc::v3::ProcessingResponse,
                                        envoy::service::ext_proc::v3::ProcessingRequest>* stream);

  const ServiceCounters& counters() const { return counters_; }

 private:
  const ServiceOptions options_;
  Picker* const picker_;
  const TokenChain* const tokens_;
  ServiceCounters counters_;
};

}  // namespace kvindex::epp
