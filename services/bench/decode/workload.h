// Synthetic engine KV-event streams for the decode benchmark.
//
// A simulated vLLM worker (map events, uint64 `cf` hashes, 16-token blocks)
// serves requests: each request is a chain of blocks, half of them branching
// off a live request's prefix. Its blocks are stored on GPU in events of
// 1-32 blocks with token ids; some requests are offloaded to CPU as
// self-describing chunk events (8 blocks, overlapping by 4, so shared hashes
// are re-announced); when GPU capacity is exceeded the oldest request is
// evicted (one GPU removal, and one CPU removal per chunk copy). Every event
// is valid for a processor that starts empty, so replaying the stream on a
// fresh processor drops nothing.
//
// All payloads are generated before timing.
#pragma once

#include <cstdint>
#include <vector>

namespace kvindex::bench {

struct WorkloadOptions {
  uint32_t block_size = 16;
  uint64_t seed = 1;
  uint32_t batches = 20000;  // payloads to generate
  uint32_t max_events_per_batch = 4;
  bool removals = true;     // evict when the GPU is full
  bool cpu_offload = true;  // CPU chunk events
  uint32_t gpu_capacity_blocks = 60000;
};

struct Workload {
  std::vector<std::vector<uint8_t>> payloads;
  uint64_t events = 0;         // engine events in all payloads
  uint64_t blocks = 0;         // block hashes in stored + removed events
  uint64_t stored_blocks = 0;  // ... in stored events
  uint64_t bytes = 0;
  // Peak distinct engine blocks held: the processors' capacity hint.
  uint32_t expected_blocks = 0;
};

Workload GenerateWorkload(const WorkloadOptions& options);

}  // namespace kvindex::bench
