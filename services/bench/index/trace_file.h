// Reads a Mooncake trace (one JSON object per line with "hash_ids").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/base/status.h"

namespace kvindex::bench {

struct TraceRequest {
  std::vector<uint64_t> hash_ids;  // one per 512-token block
};

// max_requests 0 = all lines.
StatusOr<std::vector<TraceRequest>> ReadTrace(const std::string& path, size_t max_requests);

}  // namespace kvindex::bench
