// Reads Mooncake-format request traces (data/mooncake/): one JSON
// object per line with "timestamp" (ms), "input_length", "output_length" and
// "hash_ids" (each id stands for one 512-token block of prefix). Used by the
// mock engines and the benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::trace {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint32_t input_length = 0;
  uint32_t output_length = 0;      // tokens generated (the simulator's decode time)
  std::vector<uint64_t> hash_ids;  // each id stands for one 512-token block of prefix
};

// Reads at most `limit` requests (0 = all). InvalidArgument names the line.
StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t limit);

}  // namespace kvindex::trace
