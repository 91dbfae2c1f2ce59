// `kvindex-bench decode`: engine msgpack decode + normalize throughput.
//
//   kvindex-bench decode [--json] [--batches N] [--rounds R] [--seed S] [--block-size B]
//
// Generates a realistic vLLM event stream (workload.h) before timing, then
// measures on one thread, each as the median of R rounds over the whole
// stream:
//   - kvindex: wire::BatchDecoder + normalize::SourceProcessor (the agent's
//     path), and the decoder alone;
//   - baseline: a msgpack-c++ object tree walked into owning structs (what
//     generic consumers do, tree_baseline.h), alone and followed by the same
//     normalizer;
//   - GPU stores only (1-32 blocks of 16 tokens), both ways.
// Text output by default; --json prints one JSON object (blocks_per_s,
// events_per_s, baseline_blocks_per_s, ...). docs/benchmarks.md "Decode".
#pragma once

namespace kvindex::bench {

int RunDecodeBench(int argc, char** argv);

}  // namespace kvindex::bench
