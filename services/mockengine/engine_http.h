// EngineHttp: the HTTP server of one simulated engine (a worker; its dp
// ranks share it), as a vLLM OpenAI server looks to a gateway and to the
// load scrapers (services/mockengine/README.md, "Engine HTTP"):
//   POST /v1/completions, /v1/chat/completions
//            the request reaches this engine: the body must be JSON naming
//            the engine's model (else 400 / 404, as vLLM answers); the
//            request's number (header x-kvindex-request) is handed to
//            `on_request`, which says whether it was taken; a small OpenAI
//            completion answers (no text: the simulation has no decoder).
//   GET  /metrics  vLLM's gauges from the simulated state (`load`):
//            vllm:num_requests_running, vllm:num_requests_waiting,
//            vllm:kv_cache_usage_perc, and the counter
//            vllm:request_success_total.
//   GET  /health   200.
//
// Thread safety: the hooks run on the server's threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shared/base/status.h"
#include "shared/http/server.h"

namespace kvindex::mockengine {

// One engine's simulated load, summed over its ranks (KV use: the largest).
struct EngineLoad {
  uint32_t running = 0;
  uint32_t waiting = 0;
  double kv_use = 0;    // 0..1
  uint64_t served = 0;  // requests this engine served
};

// Header carrying the simulated request's number from the gateway.
inline constexpr char kRequestHeader[] = "x-kvindex-request";

struct EngineHttpHooks {
  // The request numbered `request` reached this engine; false: refused (409).
  std::function<bool(uint64_t request)> on_request;
  std::function<EngineLoad()> load;
};

class EngineHttp {
 public:
  EngineHttp(std::string listen, std::string model, EngineHttpHooks hooks);
  ~EngineHttp();

  Status Start();
  void Stop();

 private:
  void Complete(const http::Request& request, http::Response& response) const;
  void Metrics(http::Response& response) const;

  const std::string model_;
  const EngineHttpHooks hooks_;
  std::unique_ptr<http::Server> server_;
};

}  // namespace kvindex::mockengine
