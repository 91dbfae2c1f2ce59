// kvindex-bench epp: the endpoint picker through gRPC, as a gateway calls it,
// next to POST /v1/match over HTTP on the same prompts in the same run
// (docs/benchmarks.md, "Endpoint picker").
//
//   kvindex-bench epp [--entries 10000000] [--workers 64] [--sizes 1024,8192,32768]
//                     [--streams 1,16,64] [--duration 3s] [--json]
//
// The index (KvIndex, 10 M entries over 64 workers by default) is filled
// with synthetic prompts that share prefixes, on several workers each; the
// queries are token-id prompts of each size cut from them. The picker
// (EppServer, the router's own) and /v1/match (RouterApi on the event-loop
// HTTP server) run in this process on loopback ports over the same index.
// For each prompt size and each number of concurrent streams, clients that
// behave as Envoy's ext_proc filter (pick_loop.h, pick_client.h), in a
// forked process of their own (gateway_process.h; --gateway inline: in
// this one), so that the picker's and the gateways' CPU time per pick are
// measured apart, open one stream per
// request: request headers, the body (FULL_DUPLEX_STREAMED), the pick
// (timed: pick latency), the echoed body, end. The same number of
// keep-alive HTTP connections then post the same prompts to /v1/match
// (match_client.h). The timed picker runs the router's defaults, predict
// on route included (--speculative-ttl-ms 2000); before timing, every
// query's pick from a second picker without speculation is checked to be
// the worker with the index's best tier-weighted prefix.
//
// JSON: picks_per_s_1k (the best of the stream counts at 1k tokens),
// pick_p50_ms_8k / pick_p99_ms_8k (one stream, 8k tokens),
// http_match_p99_ms_8k (one connection, 8k tokens), every cell (with the
// CPU time per pick: picker, gateways, both), targets. Under callgrind,
// each cell's instructions are dumped apart (callgrind.out.<pid>.<n>).
#pragma once

namespace kvindex::bench {

int RunEppBench(int argc, char** argv);

}  // namespace kvindex::bench
