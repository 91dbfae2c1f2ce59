// RunPicks: one timed cell of picks, `streams` closed-loop gateways for
// `seconds` against the picker behind `channels`, with either client:
// "callback" (PickLoop: gRPC's callback API, no thread per stream) or
// "threads" (a blocking PickClient thread per stream). The same code runs
// in the bench's process or in its forked gateway process
// (gateway_process.h).
//
//   auto channels = PickChannels(port, 2);
//   PickSample s = RunPicks("callback", channels, bodies, requests, 16, 3.0);
//
// Thread safety: call from one thread; it starts and joins its own.
#pragma once

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "services/bench/epp/pick_loop.h"

namespace kvindex::bench {

struct PickSample {
  std::vector<double> latency_s;  // per completed pick: stream start -> the pick
  std::vector<double> stream_s;   // per completed pick: stream start -> its end
  uint64_t errors = 0;
  double wall_s = 0;  // the run's wall time
  double cpu_s = 0;   // this process's CPU time (user + system) during the run
};

// `n` gRPC connections to 127.0.0.1:port (Envoy: one per worker thread).
std::vector<std::shared_ptr<grpc::Channel>> PickChannels(int port, uint32_t n);

// This process's CPU time so far (user + system), in seconds.
double ProcessCpuSeconds();

// bodies[i] and requests[i] are the same request (threads client: the
// body; callback client: its prebuilt messages).
PickSample RunPicks(const std::string& client,
                    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                    const std::vector<std::string>& bodies,
                    const std::vector<PickRequests>& requests, uint32_t streams, double seconds);

}  // namespace kvindex::bench
