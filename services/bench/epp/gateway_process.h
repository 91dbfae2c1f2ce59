// GatewayProcess: the bench's gateways in a process of their own, so that
// the picker's CPU per pick and the gateways' are measured apart (as in a
// deployment, where Envoy is not in the router's process). Forked before
// this process starts gRPC (a fork after gRPC's threads exist is not safe),
// it holds the prebuilt requests of every prompt size and runs one cell
// (RunPicks) per command over a pipe, sending back the latencies, errors,
// wall time and its own CPU time.
//
//   auto gateway = GatewayProcess::Fork(&sizes, "callback", 2);  // before gRPC
//   ... start the picker on `port` ...
//   StatusOr<PickSample> s = gateway->Run(port, size_index, 16, 3.0);
//   // ~GatewayProcess: the child is told to exit and waited for by its pid
//
// Thread safety: one thread uses a GatewayProcess.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "services/bench/epp/pick_run.h"
#include "shared/base/status.h"

namespace kvindex::bench {

// One prompt size's requests: bodies[i] and requests[i] are the same.
struct SizeRequests {
  std::vector<std::string> bodies;
  std::vector<PickRequests> requests;
};

class GatewayProcess {
 public:
  static StatusOr<std::unique_ptr<GatewayProcess>> Fork(const std::vector<SizeRequests>* sizes,
                                                        std::string client, uint32_t channels);
  ~GatewayProcess();
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  // One cell against the picker on 127.0.0.1:port; cpu_s is the gateway
  // process's CPU time.
  StatusOr<PickSample> Run(int port, uint32_t size_index, uint32_t streams, double seconds);

 private:
  GatewayProcess(pid_t pid, int to_child, int from_child)
      : pid_(pid), to_child_(to_child), from_child_(from_child) {}

  pid_t pid_;
  int to_child_, from_child_;
};

}  // namespace kvindex::bench
