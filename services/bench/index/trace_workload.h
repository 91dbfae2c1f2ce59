// The trace workload: the Mooncake conversation trace replayed through a
// simulated tiered cluster, so every tier of the index is populated.
//
// Each request goes to worker g mod W. A 512-token hash id becomes 32 blocks of
// 16 synthetic tokens, hashed canonically (shared/hashing). Per worker:
// device is an LRU (leaf-first, as in the peer workload); a block evicted from
// device is offloaded to host, host's FIFO overflow to disk, disk's to
// external, external's overflow is dropped. Every step becomes placement
// events (removed/stored per tier), lower tiers first: an offloaded block is
// stored in its new tier before its old tier frees it, as engines report it.
// The trace is duplicated into disjoint hash spaces (copies) until the index
// holds >= min_entries (source, block) entries; one more copy is the "churn"
// stream applied during the latency measurement.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/model/placement_event.h"
#include "shared/trace/mooncake_trace.h"

namespace kvindex::bench {

inline constexpr char kTraceModel[] = "trace";

struct TraceConfig {
  uint32_t workers = 64;
  // Blocks per worker and tier (device, host, disk, external). Default sum
  // 160,000 x 64 workers = 10.24 M entries at saturation.
  uint64_t capacity[4] = {48000, 48000, 40000, 24000};
  uint64_t min_entries = 10000000;
  uint32_t max_copies = 32;
};

struct SimRequest {
  std::vector<PlacementEvent> events;
  std::vector<uint64_t> query;  // 128 blocks: the request's first blocks, padded with misses
};

struct TraceStream {
  std::vector<SimRequest> fill;   // copies until >= min_entries
  std::vector<SimRequest> churn;  // one more copy
  uint32_t copies = 0;            // fill copies
  uint64_t entries_after_fill = 0;
  uint64_t entries_after_churn = 0;
  uint64_t fill_block_ops = 0;
  uint64_t churn_block_ops = 0;
  uint64_t entries_per_tier[4] = {};  // after churn
};

TraceStream GenerateTraceStream(const std::vector<trace::TraceRequest>& trace,
                                const TraceConfig& config);

}  // namespace kvindex::bench
