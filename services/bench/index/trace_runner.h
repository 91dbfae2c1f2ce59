// Runs the trace workload against one index: apply throughput with the
// backlog fully drained, then lookup service time from one reader thread while
// one writer thread applies the churn stream at a fixed fraction of capacity.
#pragma once

#include <cstdint>
#include <vector>

#include "services/bench/index/trace_workload.h"
#include "shared/index/index_interface.h"

namespace kvindex::bench {

struct TraceApply {
  uint64_t block_ops = 0;
  double seconds = 0;  // wall time from the first event to the last applied
  double ops_per_s() const { return seconds > 0 ? static_cast<double>(block_ops) / seconds : 0; }
};

// Applies fill + churn on one thread, timed end to end.
TraceApply MeasureTraceApply(index::IndexInterface& index, const TraceStream& stream);

struct TraceLatency {
  std::vector<uint32_t> idle_ns;    // no writer running
  std::vector<uint32_t> loaded_ns;  // writer applying churn at write_rate
  double write_rate_target = 0;     // block-ops/s
  double write_rate_achieved = 0;
  uint64_t matched_blocks = 0;  // sum of per-worker longest of the loaded queries
  index::IndexStats stats;      // after churn
};

// Applies fill untimed, then churn from a writer thread at `write_rate`
// block-ops/s while the calling thread queries recent requests' prefixes.
TraceLatency MeasureTraceLatency(index::IndexInterface& index, const TraceStream& stream,
                                 double write_rate);

}  // namespace kvindex::bench
