// IngestSourceStatus: what the ingest side reports about one engine source
// (sequence position and recovery counters). Produced by the agent pipeline,
// served by the router's /v1/workers; kept in the model so neither depends on
// the other.
#pragma once

#include <cstdint>
#include <string>

namespace kvindex {

struct IngestSourceStatus {
  std::string worker;
  uint32_t dp_rank = 0;
  std::string model;
  uint64_t last_seq = 0;  // last engine seq applied; meaningful when has_seq
  bool has_seq = false;
  uint64_t gaps = 0, replays_ok = 0, replays_failed = 0, restarts = 0;
};

}  // namespace kvindex
