#include "services/mockengine/load_model.h"

#include <algorithm>

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

LoadModel::LoadModel(LoadOptions options, size_t sources, std::vector<uint32_t> max_running)
    : options_(options), queues_(sources) {
  for (size_t k = 0; k < sources && k < max_running.size(); ++k) {
    queues_[k].max_running = max_running[k];
  }
}

void LoadModel::Advance(Queue& queue, double now_us) {
  // Starts first: a request that started and finished by now adds its
  // blocks, then gives them back.
  while (!queue.starts.empty() && queue.starts.front().first <= now_us) {
    queue.running_blocks += queue.starts.front().second;
    queue.starts.pop_front();
  }
  while (!queue.finishes.empty() && queue.finishes.top().first <= now_us) {
    queue.running_blocks -= queue.finishes.top().second;
    queue.finishes.pop();
  }
}

uint32_t LoadModel::InFlight(size_t source, double now_us) {
  Queue& queue = queues_[source];
  Advance(queue, now_us);
  return static_cast<uint32_t>(queue.finishes.size());
}

SourceLoad LoadModel::Load(size_t source, double now_us) {
  Queue& queue = queues_[source];
  Advance(queue, now_us);
  return {.running = static_cast<uint32_t>(queue.finishes.size() - queue.starts.size()),
          .waiting = static_cast<uint32_t>(queue.starts.size()),
          .blocks = queue.running_blocks};
}

double LoadModel::Start(size_t source, double now_us, uint64_t uncached_tokens,
                        uint32_t output_tokens, double speed, uint64_t blocks, double* wait_us) {
  Queue& queue = queues_[source];
  const double service_us = (static_cast<double>(uncached_tokens) * options_.prefill_us_per_token +
                             output_tokens * options_.decode_us_per_token) /
                            (speed > 0 ? speed : 1.0);
  double start_us = now_us;
  if (queue.max_running > 0) {
    // First come, first served over max_running slots: once all are taken,
    // the request starts when the earliest of them frees (starts are then
    // non-decreasing, as `starts` needs).
    if (queue.slots.size() >= queue.max_running) {
      start_us = std::max(now_us, queue.slots.top());
      queue.slots.pop();
    }
    queue.slots.push(start_us + service_us);
  }
  if (wait_us != nullptr) *wait_us = start_us - now_us;
  queue.starts.push_back({start_us, blocks});
  queue.finishes.push({start_us + service_us, blocks});
  Advance(queue, now_us);
  return service_us;
}

}  // namespace kvindex::mockengine
