// kvindex-bench index --workload clear: the cost of an agent's clear (one
// kCleared per source, as the router applies a sender gap or an expiry) in a
// full index, and how long fallback readers can wait for it.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace kvindex::bench {

struct ClearConfig {
  uint64_t entries = 10000000;  // (source, tier, block) entries before each clear
  uint32_t agents = 8;          // x ranks = sources
  uint32_t ranks = 8;           // sources cleared per message (one agent's)
  uint32_t runs = 3;            // clears measured (the sources are restored between)
  uint64_t seed = 1;
};

// Fills `out` with the figures; returns 0, or 1 when the index does not end
// each clear holding exactly the other agents' entries.
int RunClearWorkload(const ClearConfig& config, nlohmann::json* out);

}  // namespace kvindex::bench
