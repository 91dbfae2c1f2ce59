// Runs the trace workload against one index: apply throughput with the
// backlog fully drained, then lookup service time from one reader thread while
// one writer thread applies the churn stream at a fixed fraction of capacity.
#pragma once

#include <cstdint>
#include <vector>

#include "services/bench/index/trace_workload.h"
#include "shared/index/index_interface.h"

namespace kvindex::bench {

struct TraceRun {
  uint64_t fill_block_ops = 0;
  double fill_seconds = 0;          // wall time from the first event to the last applied
  double apply_ops_per_s = 0;       // fill_block_ops / fill_seconds
  std::vector<uint32_t> idle_ns;    // no writer running
  std::vector<uint32_t> loaded_ns;  // writer applying churn at write_load x capacity
  double write_rate_target = 0;     // block-ops/s
  double write_rate_achieved = 0;
  uint64_t matched_blocks = 0;  // sum of per-worker longest of the loaded queries
  index::IndexStats stats;      // after churn
};

// Applies the fill stream on this thread, timed end to end (the backlog is
// drained when the last Apply returns): that is the apply capacity. Then the
// churn stream from a writer thread paced at write_load x capacity while this
// thread measures lookups of recent requests' prefixes.
// churn_requests caps the churn requests applied (0 = the whole copy).
TraceRun RunTrace(index::IndexInterface& index, const TraceStream& stream, double write_load,
                  size_t churn_requests);

}  // namespace kvindex::bench
