// ExtProcExchange: the endpoint picker protocol of one ext_proc stream (one
// HTTP request), as the Gateway API Inference Extension defines it
// (docs/epp.md, "Protocol"), free of the transport: each ProcessingRequest
// in, the ProcessingResponses it calls for out, in order.
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
// Bodies are moved, not copied, where they can be: a request body that
// arrives in one message is taken from the request, and echoed in the
// answer when it fits one chunk; a streamed response body chunk likewise.
//
//   ExtProcExchange exchange(&options, picker, tokens, &counters);
//   exchange.Handle(&request, &out);   // appends the answers to `out`
//   if (exchange.finished()) ...       // an immediate response ended it
//   exchange.End();                    // once, when the stream ends
//
// Thread safety: one exchange per stream, used by one thread at a time;
// shared state is the picker's and the atomic counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.pb.h"
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

class ExtProcExchange {
 public:
  using Request = envoy::service::ext_proc::v3::ProcessingRequest;
  using Response = envoy::service::ext_proc::v3::ProcessingResponse;

  ExtProcExchange(const ServiceOptions* options, Picker* picker, const TokenChain* tokens,
                  ServiceCounters* counters);
  ExtProcExchange(const ExtProcExchange&) = delete;
  ExtProcExchange& operator=(const ExtProcExchange&) = delete;
  // Releases the pick's in-flight slot and counts the stream's end (End()
  // if not called yet).
  ~ExtProcExchange();

  // One message from the gateway; its answers are appended to `out`. The
  // request's bodies may be moved from.
  void Handle(Request* request, std::vector<Response>* out);
  // An immediate response ended the exchange: read no more.
  bool finished() const { return finished_; }
  // Request body bytes held while the pick waits for the body's end (at
  // most max_body_bytes; the fuzzer checks it).
  size_t buffered_bytes() const { return body_.size(); }
  // The stream ended (the gateway half-closed, cancelled or the stream
  // failed): counts how, releases the pick. Idempotent.
  void End();

 private:
  void Decide(bool body_end, bool trailers_follow, bool load_only, std::vector<Response>* out);

  const ServiceOptions* const options_;
  Picker* const picker_;
  const TokenChain* const tokens_;
  ServiceCounters* const counters_;

  envoy::service::ext_proc::v3::BodySendMode request_mode_;
  envoy::service::ext_proc::v3::BodySendMode response_mode_;
  std::string path_;
  std::optional<std::vector<std::string>> subset_;
  bool headers_seen_ = false;
  bool headers_answered_ = false;
  bool body_seen_ = false;
  bool decided_ = false;      // the pick (or an immediate response) was sent
  bool finished_ = false;     // an immediate response ended the exchange
  bool passthrough_ = false;  // oversize, fail open: later chunks echoed as they come
  bool ended_ = false;
  ServiceCounters::End end_ = ServiceCounters::kComplete;
  std::string body_;
  std::vector<std::string> picked_;
};

}  // namespace kvindex::epp
