#include "services/mockengine/load_model.h"

namespace kvindex::mockengine {

std::vector<double> ArrivalTimesUs(std::span<const trace::TraceRequest> requests, double rate) {
  std::vector<double> out(requests.size());
  bool increasing = requests.size() > 1;
  for (size_t r = 1; r < requests.size() && increasing; ++r) {
    increasing = requests[r].timestamp_ms >= requests[r - 1].timestamp_ms;
  }
  increasing = increasing && requests.back().timestamp_ms > requests.front().timestamp_ms;
  // Without usable timestamps, --rate spaces the arrivals (200/s when 0).
  const double interval_us = 1e6 / (rate > 0 ? rate : 200.0);
  for (size_t r = 0; r < requests.size(); ++r) {
    out[r] =
        increasing
            ? static_cast<double>(requests[r].timestamp_ms - requests.front().timestamp_ms) * 1000.0
            : static_cast<double>(r) * interval_us;
  }
  return out;
}

LoadModel::LoadModel(LoadOptions options, size_t sources)
    : options_(options), finish_us_(sources), blocks_(sources, 0) {}

uint32_t LoadModel::InFlight(size_t source, double now_us) {
  MinHeap& heap = finish_us_[source];
  while (!heap.empty() && heap.top().first <= now_us) {
    blocks_[source] -= heap.top().second;
    heap.pop();
  }
  return static_cast<uint32_t>(heap.size());
}

double LoadModel::Start(size_t source, double now_us, uint64_t uncached_tokens,
                        uint32_t output_tokens, double speed, uint64_t blocks) {
  const double service_us = (static_cast<double>(uncached_tokens) * options_.prefill_us_per_token +
                             output_tokens * options_.decode_us_per_token) /
                            (speed > 0 ? speed : 1.0);
  finish_us_[source].push({now_us + service_us, blocks});
  blocks_[source] += blocks;
  return service_us;
}

}  // namespace kvindex::mockengine
