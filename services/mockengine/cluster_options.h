// ClusterOptions: the simulated fleet as configured by kvindex-mockengine's
// flags: per-worker engines (wire form, tier capacities, dp ranks, speed, max running,
// model, offload event style), placement, load model and fault knobs.
//
//   ClusterOptions o = ...;  // from flags
//   KVINDEX_RETURN_IF_ERROR(ApplyEngineOverride("index=1,wire=sglang,disk=512", &o));
//   for (const std::string& s : SourceStrings(o)) puts(s.c_str());
//
// Thread safety: plain values.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "services/mockengine/fault_plan.h"
#include "services/mockengine/load_model.h"
#include "services/mockengine/placement_policy.h"
#include "shared/base/status.h"

namespace kvindex::mockengine {

// One worker's engine (each of its dp ranks is an independent engine cache).
struct WorkerConfig {
  std::string wire = "vllm-map";  // vllm-map, vllm-array, sglang, trtllm
  size_t device = 16384;          // blocks per rank
  size_t host = 0;
  size_t disk = 0;
  uint32_t dp_ranks = 1;
  double speed = 1.0;
  uint32_t max_running = 0;        // requests a rank runs at once (0 = no limit); the rest wait
  std::string model;               // one of ClusterOptions::models
  bool cpu_events_tokens = false;  // self-describing offload events
};

struct ClusterOptions {
  std::vector<WorkerConfig> workers;
  std::vector<std::string> models;  // worker i serves models[i % M]; request r models[r % M]
  std::string worker_prefix = "w";
  std::string host = "127.0.0.1";
  int pub_base_port = 5557;
  int replay_base_port = 5657;  // 0 = no replay sockets
  std::string topic;
  uint32_t block_size = 16;
  double rate = 200;  // wall-clock pacing, requests/s; 0 = as fast as possible
  Policy policy = Policy::kRoundRobin;
  std::string router_url;        // kv-aware: where POST /v1/match goes
  double kv_load_weight = 0.25;  // kv-aware: cost of one queued request, in prompts
  std::string epp_address;       // epp: the router's ext_proc (--epp host:port)
  // Worker i's OpenAI server and /metrics on host:(base + i); 0 = none.
  int engine_http_base_port = 0;
  LoadOptions load;
  uint64_t seed = 1;
  std::array<FaultSpec, kNumFaultKinds> faults{};
  // Wall time between the agent's replay for one loss fault (drop, gap,
  // slow, TensorRT-LLM restart) and the next loss on the same source: the
  // agent skips a replay within its cooldown (1 s) and clears instead.
  std::chrono::milliseconds fault_min_interval{2000};
  bool dry_run = false;
  bool record_requests = false;  // keep one JSON line per request (RequestsJsonl)
};

// "index=I,wire=W,device=N,host=N,disk=N,dp_ranks=N,speed=F,max_running=N,
// model=NAME,cpu_events=placeholder|tokens": overrides worker I. InvalidArgument names
// the bad key or value.
Status ApplyEngineOverride(std::string_view text, ClusterOptions* options);

// Worker i's OpenAI server, "host:port" ("" without engine_http_base_port).
std::string EngineAddress(const ClusterOptions& options, size_t worker);

// Checks wire forms, models and ranks after overrides.
Status Validate(const ClusterOptions& options);

// "vllm", "sglang" or "trtllm": the engine= of a wire form.
std::string_view EngineOfWire(std::string_view wire);

// One router --source string per worker ("worker=w0,engine=vllm,model=M,
// block_size=16,pub=tcp://H:P,replay=tcp://H:R[,dp_ranks=N][,endpoint=H:E]").
std::vector<std::string> SourceStrings(const ClusterOptions& options);

}  // namespace kvindex::mockengine
