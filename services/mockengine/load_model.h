// LoadModel: a simulated clock for placement decisions, deterministic (no
// wall clock), documented in README.md ("Load model").
//
// Arrival of request r: the trace's timestamp (ms) when the trace's
// timestamps increase, else r / rate. Service time: (uncached prompt tokens
// * prefill_us_per_token + output tokens * decode_us_per_token) / speed.
// A request is in flight on its source from arrival to arrival + service,
// holding its prompt's blocks on the device meanwhile (the engine's KV-cache
// use, as vLLM reports it: blocks of running requests, not cached ones).
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <vector>

#include "shared/trace/mooncake_trace.h"

namespace kvindex::mockengine {

struct LoadOptions {
  double prefill_us_per_token = 20;
  double decode_us_per_token = 2000;
};

// Arrival times in microseconds from the first request.
std::vector<double> ArrivalTimesUs(std::span<const trace::TraceRequest> requests, double rate);

class LoadModel {
 public:
  LoadModel(LoadOptions options, size_t sources);

  // Requests still running on `source` at `now_us` (non-decreasing calls).
  uint32_t InFlight(size_t source, double now_us);
  // Device blocks the requests in flight at the last InFlight(source, ..) hold.
  uint64_t InFlightBlocks(size_t source) const { return blocks_[source]; }
  // Starts a request on `source` at `now_us` holding `blocks` device blocks
  // while it runs; returns its service time.
  double Start(size_t source, double now_us, uint64_t uncached_tokens, uint32_t output_tokens,
               double speed, uint64_t blocks = 0);

 private:
  // (finish time, blocks), earliest finish on top.
  using Running = std::pair<double, uint64_t>;
  using MinHeap = std::priority_queue<Running, std::vector<Running>, std::greater<>>;
  LoadOptions options_;
  std::vector<MinHeap> finish_us_;
  std::vector<uint64_t> blocks_;
};

}  // namespace kvindex::mockengine
