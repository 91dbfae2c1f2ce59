// Per-(source, dp_rank) normalization state (internal to SourceProcessor).
//
// Invariants:
// - `engine` holds every engine hash the rank still holds in some tier:
//   an entry exists iff some counts[t] > 0 (it is erased when all reach 0).
// - `canonical[c][t]` equals the sum of counts[t] over the engine entries
//   whose canonical hash is c (several engine hashes may share one canonical
//   hash, e.g. multimodal blocks with equal placeholder tokens); an entry
//   exists iff some count > 0.
// - A "stored" placement is emitted exactly when canonical[c][t] goes
//   0 -> 1 and a "removed" exactly when it goes 1 -> 0, so the published set
//   for (rank, t) is {c : canonical[c][t] > 0}.
#pragma once

#include <array>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "shared/model/tier.h"

namespace kvindex::normalize::internal {

struct EngineEntry {
  uint64_t canonical = 0;
  // Canonical hash of the block before this one when it was first announced
  // with tokens (lets placeholder re-announcements carry a correct parent).
  uint64_t parent = 0;
  std::array<uint32_t, kNumTiers> counts = {};
  bool has_parent = false;
};

using TierCounts = std::array<uint32_t, kNumTiers>;

inline bool AllZero(const TierCounts& counts) {
  for (uint32_t c : counts) {
    if (c != 0) return false;
  }
  return true;
}

struct RankState {
  uint32_t dp_rank = 0;
  absl::flat_hash_map<uint64_t, EngineEntry> engine;    // engine hash -> entry
  absl::flat_hash_map<uint64_t, TierCounts> canonical;  // canonical hash -> counts
  // Canonical hashes with a non-zero count, per tier (the blocks the rank
  // holds there), for SourceOptions::max_blocks_per_tier.
  std::array<uint64_t, kNumTiers> held = {};

  void Clear() {
    engine.clear();
    canonical.clear();
    held = {};
  }
};

}  // namespace kvindex::normalize::internal
