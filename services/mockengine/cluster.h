// Cluster: the simulated fleet and its request loop. Each request of the
// trace goes to one source (worker, dp rank) of its model, chosen by the
// placement policy (kv-aware asks a router's /v1/match over HTTP, as a
// gateway would; epp sends it through the router's endpoint picker to the
// engine's own HTTP server, as a GAIE gateway does); the engine serves it, its events are published
// (or, under a fault knob, dropped, cut, preceded by garbage, or lost to a restart), and the ground
// truth, the per-request prefix hits and the load are kept.
//
//   Cluster cluster(options, std::move(requests), trace_path);
//   KVINDEX_RETURN_IF_ERROR(cluster.Bind(context));   // not in dry run
//   cluster.Run(stop, start_delay);
//   cluster.TruthJson(); cluster.ReportJson();
//
// Thread safety: Run() and ServeReplayFor() from one thread; the JSON and
// match accessors from any thread (HTTP handlers), under one mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"

#include "services/mockengine/agent_view.h"
#include "services/mockengine/cluster_options.h"
#include "services/mockengine/engine_endpoint.h"
#include "services/mockengine/engine_http.h"
#include "services/mockengine/epp_gateway.h"
#include "services/mockengine/fault_plan.h"
#include "services/mockengine/ground_truth.h"
#include "services/mockengine/load_model.h"
#include "services/mockengine/placement_policy.h"
#include "services/mockengine/simulated_engine.h"
#include "shared/base/mutex.h"
#include "shared/http/client.h"
#include "shared/index/index_types.h"
#include "shared/log/log.h"
#include "shared/trace/mooncake_trace.h"
#include "shared/wire/event_encoder.h"

namespace kvindex::mockengine {

class Cluster {
 public:
  Cluster(ClusterOptions options, std::vector<trace::TraceRequest> requests, std::string trace);

  ~Cluster();

  // Binds every source's PUB and replay sockets, and starts the engines'
  // HTTP servers (engine_http_base_port).
  Status Bind(zmq::context_t& context);
  // Serves the trace (paced by --rate unless dry run) until done or `stop`,
  // then the end fences. Returns after the last request.
  void Run(const std::atomic<bool>& stop, std::chrono::milliseconds start_delay);
  // Answers replay requests for `duration` (or until `stop`).
  void ServeReplayFor(const std::atomic<bool>& stop, std::chrono::milliseconds duration);

  bool done() const { return done_.load(); }
  std::string TruthJson() const;
  std::string ReportJson() const;
  std::string ProgressJson() const;
  // One JSON object per request served, in order (with record_requests):
  // where it was placed and the prefix the engine had cached for it.
  std::string RequestsJsonl() const;
  // POST /v1/match over the truth: status and body. `index_view` = what the
  // index may hold (cleared sources: only what they stored since the clear).
  // `body` is followed by http::kBodyPadding readable bytes, as the HTTP
  // server leaves them (the request parser reads ahead into them).
  int MatchJson(std::string_view body, bool index_view, std::string* out) const;

 private:
  struct Source {
    size_t worker = 0;
    size_t model = 0;
    SourceKey key;
    const WorkerConfig* config = nullptr;
    std::unique_ptr<SimulatedEngine> engine;
    AgentView view;
    std::unique_ptr<EngineEndpoint> endpoint;  // null in dry run
    wire::EncodeOptions encoding;
    bool sglang = false, trtllm = false;
    bool has_replay = false;
    bool cleared_by_fault = false;
    bool needs_fence = false;  // the agent has not seen a live batch since a fault
    uint32_t slow_left = 0;    // batches of a slow-subscriber burst still to lose
    bool restarted = false;    // no batch published since a restart
    // The agent replays when it sees the first live batch after a loss; a
    // second replay within its cooldown would be skipped (a clear), so
    // losses on a source are spaced (ClusterOptions::fault_min_interval).
    bool loss_outstanding = false;
    std::optional<std::chrono::steady_clock::time_point> replayed_at;
    uint32_t epoch = 0;  // SGLang
  };

  void ServeRequest(size_t r);
  // Publishes one batch of `source` with the fault knobs applied.
  void PublishBatch(Source& source, size_t r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Restart(Source& source, size_t r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool LossAllowed(const Source& source) const;
  void Send(Source& source, std::span<const uint8_t> payload, bool live, bool keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void PublishFences() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool AskRouter(size_t model, std::span<const uint32_t> tokens, index::MatchResult* out);
  // --policy epp: request r through the endpoint picker to an engine; the
  // worker whose HTTP server took it (none: the exchange failed before).
  // *pick_us: stream start -> the pick (set when the picker picked).
  std::optional<size_t> RouteThroughEpp(size_t r, size_t model, std::span<const uint32_t> tokens,
                                        std::optional<double>* pick_us);
  // The engines' load as their /metrics report it, after request r's arrival.
  void UpdateEngineLoad(size_t model, double now_us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string TopicOf(const Source& source) const;
  void WriteReport(std::string* out) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The engines' state as the truth functions read it (views into sources_).
  std::vector<TruthSource> TruthSources() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const ClusterOptions options_;
  const std::vector<trace::TraceRequest> requests_;
  const std::string trace_;
  std::shared_ptr<spdlog::logger> logger_;
  std::vector<Source> sources_;
  std::vector<std::vector<size_t>> by_model_;  // source indices per model, in order
  std::vector<double> arrivals_us_;
  PlacementPolicy policy_;
  LoadModel load_;
  FaultPlan faults_;
  http::Url router_;
  std::chrono::steady_clock::time_point started_ ABSL_GUARDED_BY(mutex_);

  // Guards the figures below, and the engines and views in sources_: the
  // simulation thread changes those only under it, and reads them without
  // it (it is their only writer); the HTTP threads read them under it.
  mutable Mutex mutex_;
  std::atomic<bool> done_{false};
  size_t requests_done_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t batches_published_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t events_published_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t fences_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t prompt_blocks_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t hit_blocks_[3] ABSL_GUARDED_BY(mutex_) = {};
  uint64_t prefill_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t saved_tokens_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<uint64_t> requests_per_worker_ ABSL_GUARDED_BY(mutex_);
  double in_flight_sum_ ABSL_GUARDED_BY(mutex_) = 0;
  // The engines' queues: the most requests waiting on one source at once;
  // each request's wait for a slot (simulated us).
  uint32_t max_waiting_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<double> wait_us_ ABSL_GUARDED_BY(mutex_);
  std::vector<double> match_latency_us_ ABSL_GUARDED_BY(mutex_);
  uint64_t match_errors_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t match_unknown_model_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string requests_jsonl_ ABSL_GUARDED_BY(mutex_);
  // --policy epp: per worker, the load its /metrics shows; the worker
  // whose engine took each request being routed; what went wrong.
  std::vector<EngineLoad> engine_load_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<uint64_t, size_t> received_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int64_t> routing_{-1};                    // the request the gateway is routing
  uint64_t epp_misrouted_ ABSL_GUARDED_BY(mutex_) = 0;  // taken by another engine than served
  uint64_t epp_fallbacks_ ABSL_GUARDED_BY(mutex_) = 0;  // served by a fallback endpoint
  uint64_t epp_immediate_ ABSL_GUARDED_BY(mutex_) = 0;  // 503 / 429 / 4xx instead of a pick
  absl::flat_hash_map<std::string, size_t> worker_of_address_;
  std::unique_ptr<EppGateway> epp_;

  // Per-request scratch, reused.
  std::vector<wire::WireEvent> events_;
  std::vector<uint8_t> payload_;
  std::vector<Candidate> candidates_;
  std::vector<Candidate> routed_candidates_;
  std::vector<size_t> routed_members_;

  // Last: stopped before the state their handlers read goes away.
  std::vector<std::unique_ptr<EngineHttp>> engine_http_;
};

}  // namespace kvindex::mockengine
