// `kvindex-bench index`: apply throughput, lookup latency and bytes per entry
// of the tiered index (shared/index) next to a baseline measured in the same
// run, on two workloads:
//   --workload trace  Mooncake conversation trace through a simulated tiered
//                     cluster; lookups under a 50%-of-capacity writer thread.
//   --workload peer   the peer workload (docs/benchmarks.md, "Peer workload")
//                     exactly; verifies its checksums and fails when they differ.
// `--json` prints one JSON object instead of the text report. Peer only:
// `--copies` / `--capacity` scale the stream (40 M entries: 16 / 625000;
// 160 M: 64 / 2500000), `--runs N` reports min / median / max over N fresh
// builds of the index, `--profile` samples the block locator (load, growths,
// probe lengths) outside the timed spans.
//
//   kvindex-bench index --workload peer --json
//   kvindex-bench index --workload peer --copies 16 --capacity 625000 --no-baseline --runs 5
#pragma once

namespace kvindex::bench {

// argv[0] == "index". Returns the process exit code (0 ok, 1 checksum or run
// failure, 2 bad flags).
int RunIndexBench(int argc, char** argv);

}  // namespace kvindex::bench
