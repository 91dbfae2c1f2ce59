// BuildSyntheticIndex: the synthetic workload of `kvindex-bench http` and
// `kvindex-bench epp` (docs/benchmarks.md): prompts of random tokens, half
// of them sharing a "system prompt" of 1..max_shared_blocks blocks with a
// recent one, each stored on `replicas` random workers (SyntheticWorkerName,
// rank 0), a random prefix of a quarter to all of it each, a fifth in the host
// tier, until the index holds `entries` entries. Returns `queries` of the
// prompts (a reservoir sample). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/index/kv_index.h"

namespace kvindex::bench {

struct SyntheticIndexOptions {
  std::string model = "bench-model";
  uint64_t entries = 10'000'000;
  uint32_t workers = 64;
  uint32_t block_size = 16;
  uint32_t prompt_blocks = 64;
  uint32_t replicas = 8;
  uint32_t queries = 256;
  uint32_t max_shared_blocks = 16;
  uint64_t seed = 42;
};

// Worker w's name: decimal, as Dynamo's WorkerId is (its
// /query_tiered_by_hash answers only numeric workers).
inline std::string SyntheticWorkerName(uint32_t w) { return std::to_string(1000 + w); }

std::vector<std::vector<uint32_t>> BuildSyntheticIndex(const SyntheticIndexOptions& o,
                                                       index::KvIndex* index);

}  // namespace kvindex::bench
