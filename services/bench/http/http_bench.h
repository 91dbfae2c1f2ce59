// kvindex-bench http: /v1/match over HTTP next to the in-process lookup, so
// the cost of the transport is visible (docs/benchmarks.md, "HTTP").
//
//   kvindex-bench http [--entries 10000000] [--workers 64] [--duration 10s]
//                      [--connections 16] [--wrk-threads 1] [--json]
//
// Builds a synthetic index in-process (prompts of --query-blocks blocks of
// --block-size random tokens, each held in full or in part by several of
// --workers sources, until --entries (source, block) entries exist), then
// measures on the same queries:
//   1. index lookup in-process (MatchTokens: hashing + match),
//   2. the /v1/match handler in-process (JSON parse + lookup + JSON write),
//   3. /v1/match over HTTP on 127.0.0.1 with wrk (Debian package `wrk`),
// and prints requests/s with p50/p99 for each. Exit 1 when wrk is missing
// or fails.
#pragma once

namespace kvindex::bench {

int RunHttpBench(int argc, char** argv);

}  // namespace kvindex::bench
