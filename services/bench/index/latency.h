// Latency samples and percentiles for the index benchmark.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/index/index_interface.h"

namespace kvindex::bench {

inline uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// One lookup as a router makes it, timed. A router hashes a request's tokens
// (or parses its hashes) right before it matches, so the query is in cache
// when the lookup starts; stored queries of a replayed stream are not, so
// they are read before the clock starts (for kvindex and the baseline alike).
inline StatusOr<index::MatchResult> TimedMatch(const index::IndexInterface& index,
                                               std::string_view model,
                                               std::span<const uint64_t> query, uint32_t* ns) {
  uint64_t x = 0;
  for (uint64_t h : query) x ^= h;
  asm volatile("" : : "r"(x));
  const uint64_t t0 = NowNs();
  StatusOr<index::MatchResult> r = index.MatchSequenceHashes(model, query);
  *ns = static_cast<uint32_t>(NowNs() - t0);
  return r;
}

// The middle sample (the lower one of an even count); 0 when there is none.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[(v.size() - 1) / 2];
}

struct Percentiles {
  double p50 = 0, p99 = 0, p999 = 0, mean = 0;
  uint64_t count = 0;
};

// Sorts `samples` in place.
inline Percentiles ComputePercentiles(std::vector<uint32_t>* samples) {
  Percentiles p;
  if (samples->empty()) return p;
  std::sort(samples->begin(), samples->end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(samples->size() - 1) + 0.5);
    return static_cast<double>((*samples)[i]);
  };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  double sum = 0;
  for (uint32_t s : *samples) sum += s;
  p.mean = sum / static_cast<double>(samples->size());
  p.count = samples->size();
  return p;
}

}  // namespace kvindex::bench
