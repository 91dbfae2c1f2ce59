// kvindex-bench e2e: the whole path, simulated engines -> ZMQ -> agent ->
// JetStream (file storage) -> router -> /v1/match, next to the embedded path
// (engines -> ZMQ -> in-process agent pipeline -> router) measured in the same
// run as the baseline (docs/benchmarks.md, "End to end").
//
//   kvindex-bench e2e [--rate 100000] [--duration 5s] [--throughput-ops 2000000]
//                     [--engines 2] [--agents 1] [--blocks-per-event 32] [--nats URL]
//                     [--json]
//
// For each path it measures:
//   - visibility: at a fixed offered load (--rate block-ops/s, stores and
//     removals), the time from an engine's publish of a stored chain to the
//     moment /v1/match over HTTP shows the whole chain (p50/p99, one probe at
//     a time, polling every 100 us);
//   - sustained throughput: --throughput-ops block-ops published as fast as
//     the engines can, divided by the time until the last chain is visible.
// The agents and the router run in this process (the same libraries as the
// binaries); --agents N runs N agents on the JetStream path, each with its
// own NATS connection and node id, engine i reporting to agent i % N; nats-server is started on a
// free loopback port with a temp store unless --nats is given. JSON (--json) has block_ops_per_s,
// visible_p50_ms, visible_p99_ms for the JetStream path and the same under
// "embedded".
#pragma once

namespace kvindex::bench {

int RunE2eBench(int argc, char** argv);

}  // namespace kvindex::bench
