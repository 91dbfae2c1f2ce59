// Router: the kvindex-router façade. Owns the index, the placement log, the
// apply loop and the HTTP API, starts them in data-flow order and stops them
// in reverse. Two logs, one apply loop: --embedded reads an InProcessSink fed
// by the in-process agent pipeline; --nats reads the JetStream stream (and
// runs the LivenessMonitor, which appends expiry decisions and resync
// requests to it).
//
//   RouterOptions options;
//   options.embedded = true;
//   options.agent.sources = ...;          // from --source
//   Router router(std::move(options));
//   KVINDEX_RETURN_IF_ERROR(router.Start());
//   ... router.port() ...
//   router.Stop();
//
// Start order: data dir -> index -> (NATS connection) -> restore from the
// newest checkpoint in <data_dir>/checkpoints -> apply loop (from the
// checkpoint's applied_seq + 1) -> checkpointer -> ingest or liveness
// monitor -> HTTP. Stop: HTTP -> ingest / monitor -> checkpointer -> apply
// loop -> one last checkpoint. With --nats a restart replays only the
// stream's tail after the checkpoint. Embedded, the index and the log
// position come back from the checkpoint too, but every source still starts
// cleared and asks its engine for everything from seq 0 (semantics.md
// section 3): the normalizer's per-source state is not checkpointed yet.
//
// Thread safety: Start/Stop from one controlling thread, both idempotent.
// Accessors from any thread while running.
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "services/router/embedded/embedded_ingest.h"
#include "services/router/embedded/registered_engines.h"
#include "services/router/epp_wiring.h"
#include "services/router/sglang_wiring.h"
#include "shared/base/status.h"
#include "shared/base/stop_signal.h"
#include "shared/consume/apply_loop.h"
#include "shared/consume/in_process_log_reader.h"
#include "shared/consume/liveness_monitor.h"
#include "shared/consume/router_probe.h"
#include "shared/epp/epp_server.h"
#include "shared/epp/load_scraper.h"
#include "shared/http/server.h"
#include "shared/index/kv_index.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/metrics/heap_trimmer.h"
#include "shared/nats/connection.h"
#include "shared/nats/stream.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/router_api.h"
#include "shared/tokenize/registry.h"
#include "storage/checkpointer.h"

namespace kvindex::router {

struct RouterOptions {
  // HTTP listen address host:port (port 0 = any free port). Default: 127.0.0.1:8080.
  std::string http = "127.0.0.1:8080";
  // HTTP server backend: the event loop, or the former civetweb
  // thread-per-connection server (kept for the benchmark comparison).
  // Default: event loop.
  http::Backend http_backend = http::Backend::kEventLoop;
  // HTTP I/O threads of the event-loop server (civetweb: worker threads =
  // concurrent connections). Default: 2.
  uint32_t http_threads = 2;
  // HTTP connections served at once; past it 503 + Retry-After (the open
  // /healthz and /readyz are still answered). Default: 1024.
  uint32_t http_max_connections = 1024;
  // HTTP timeouts: idle keep-alive, whole request header, whole body.
  // Defaults: 60 s, 10 s, 30 s.
  std::chrono::milliseconds http_idle_timeout{60000};
  std::chrono::milliseconds http_header_timeout{10000};
  std::chrono::milliseconds http_body_timeout{30000};
  // Largest request body in bytes; larger -> 413. Default: 8 MiB.
  size_t max_body_bytes = size_t{8} << 20;
  // Request bodies in memory at once, all connections together; past it
  // 503 + Retry-After. Default: 64 MiB.
  size_t http_max_body_total_bytes = size_t{64} << 20;
  // Requests in progress at once from one client address (idle kept-alive
  // connections do not count); past it 503. 0 = half of
  // http_max_connections. Default: 0.
  uint32_t http_max_connections_per_client = 0;
  // Directory for checkpoints; created when missing. Required.
  std::string data_dir;
  // Time between checkpoints; 0 = only at shutdown. Default: 10 s.
  std::chrono::milliseconds checkpoint_interval{10000};
  // A peer router's API (http://host:port): with no checkpoint in data_dir
  // yet, start from the peer's newest checkpoint (GET /v1/checkpoint) and
  // read the log from its position on. Empty = no bootstrap. Default: "".
  std::string bootstrap_from;
  // Bootstrap bounds: the checkpoint's size (the peer must send a
  // Content-Length no larger; nothing past it is read) and the whole
  // transfer's time. Defaults: 4 GiB, 5 min.
  uint64_t bootstrap_max_bytes = uint64_t{4} << 30;
  std::chrono::milliseconds bootstrap_timeout{300000};
  // When set and it becomes true (SIGTERM during start), a bootstrap under
  // way stops within ~100 ms and Start returns Cancelled. Default: none.
  const std::atomic<bool>* cancel = nullptr;
  // https:// bootstrap: PEM file of the CAs the peer's certificate must
  // chain to (its name or IP address must match the URL's host); empty =
  // the system's CAs. The API token goes to the peer only over https.
  // Default: "".
  std::string bootstrap_ca;
  // Models to index; empty = all. Default: empty.
  std::vector<std::string> models;
  // JetStream mode: read only the subjects of `models` (and the agents'
  // control and expiry subjects), one consumer per subject merged in stream
  // order (consume::FilteredLogReader); --filter-subjects. Default: false.
  bool filter_subjects = false;
  // "MODEL=DIR": the tokenizer.json of MODEL for /v1/match "text". Default: none.
  std::vector<std::string> tokenizers;
  // Bearer token for the API; empty = no authentication. Default: "".
  std::string auth_token;
  // /metrics requires the token too. Default: false.
  bool metrics_auth = false;
  // /readyz turns 503 when the router falls more than this many log
  // positions behind the log's end after it caught up; 0 = no bound
  // (query::ApiOptions::ready_max_lag). Default: 100000.
  uint64_t ready_max_lag = 100000;
  // Run the agent pipeline in-process (single node, no NATS). Default: false.
  bool embedded = false;
  // JetStream mode (embedded false): connection and stream.
  nats::NatsOptions nats;
  nats::StreamOptions stream;
  // How often agents' leases are checked (JetStream mode). Default: 250 ms.
  std::chrono::milliseconds liveness_interval{250};
  // Longest agent lease honoured, whatever a heartbeat announces (JetStream
  // mode; docs/security.md). Default: 5 min.
  std::chrono::milliseconds max_lease{std::chrono::minutes(5)};
  // Agent pipeline options (node, sources, replay timeouts) for embedded mode.
  ingest::AgentOptions agent;
  // Bytes of index (node arena + block locator) per model; past it new
  // blocks of that model are not indexed (kvindex_router_index_blocks_not_indexed_total).
  // 0 = only the index's hard limit. Default: 0.
  uint64_t max_model_bytes = 0;
  // Models the index creates (in log order, after the `models` allow-list);
  // stored events of further models are dropped and counted
  // (ApplyResult / IndexStats::events_over_model_limit, log outcome
  // index_exhausted). 0 = no cap. Default: 256.
  uint32_t max_models = 256;
  // Most live agents (nodes) the log may speak for; a new node past it is
  // refused (too_many_nodes). Each live node is guaranteed
  // (4096 - 3072) / max_nodes sources in every model (SourceQuota;
  // docs/security.md). The same on every replica. Default: 256.
  static constexpr uint32_t kMaxNodesLimit = 1024;
  uint32_t max_nodes = 256;
  // Placement log capacity (events) between ingest and apply. Default: 1 << 20.
  size_t log_capacity = size_t{1} << 20;
  // The endpoint picker (--epp ...; docs/epp.md); off while epp.listen is "".
  epp::EppOptions epp;
  // --embedded with --epp: how often the router scrapes the engines'
  // /metrics of the sources with endpoint= (--load-interval); 0 = never.
  // Default: 50 ms.
  std::chrono::milliseconds load_interval{50};
  // SGLang's KV indexer gRPC (--sglang-indexer host:port; docs/compat.md);
  // "" = off. The model its hash-only requests mean (--sglang-model); "" =
  // the one model the router knows.
  std::string sglang_listen;
  std::string sglang_model;
  // --sglang-ingest: ApplyExternalKvBatch (SGLang's bridge) feeds this
  // embedded router's log; off = UNIMPLEMENTED. Needs embedded and
  // sglang_listen. Default: off.
  bool sglang_ingest = false;
  // Embedded: engines registered over HTTP (Mooncake POST /register) followed
  // at once, besides --source; 0 = /register refused. Saved in
  // <data_dir>/registrations.json across restarts. Default: 64.
  uint32_t max_registrations = 64;

  Status Validate() const;
  // The HTTP server's options (listen address, limits, timeouts, token).
  http::ServerOptions HttpOptions() const;
};

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  Status Start();
  void Stop();

  uint16_t port() const { return server_ ? server_->port() : 0; }
  const index::KvIndex& index() const { return *index_; }
  prometheus::Registry& registry() { return *registry_; }
  bool Ready() const { return api_ != nullptr && api_->Ready(nullptr); }
  // The endpoint picker's ports (0 when --epp is off).
  int epp_port() const { return epp_ ? epp_->port() : 0; }
  int epp_health_port() const { return epp_ ? epp_->health_port() : 0; }
  // SGLang's KV indexer port (0 when --sglang-indexer is off).
  int sglang_port() const { return sglang_ ? sglang_->port() : 0; }
  // What the last Start restored.
  const storage::RestoreResult& restored() const { return restored_; }

 private:
  // The picker's load signals (docs/epp.md): embedded, scrape the sources'
  // engines; --nats, subscribe to the agents' load reports.
  Status StartLoadSignals();
  void StopLoadSignals();
  // --bootstrap-from: the peer's newest checkpoint into the empty data dir.
  void Bootstrap();
  // JetStream mode: every second, whether the stream exists and is the one
  // first seen (its creation time); /readyz fails otherwise.
  void WatchStream();
  bool StreamReady(std::string* reason) const;
  RouterOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<consume::RouterProbe> probe_;
  std::unique_ptr<index::KvIndex> index_;
  // Declared before the reader and the monitor: they use its subscriptions
  // and context, so they must go first.
  std::unique_ptr<nats::Connection> connection_;
  std::unique_ptr<InProcessSink> sink_;
  std::unique_ptr<consume::LogReader> reader_;
  std::unique_ptr<consume::ApplyLoop> apply_;
  std::unique_ptr<storage::Checkpointer> checkpointer_;
  std::unique_ptr<consume::LivenessMonitor> liveness_;
  std::unique_ptr<EmbeddedIngest> ingest_;
  std::unique_ptr<RegisteredEngines> registered_;            // embedded: POST /register
  std::unique_ptr<tokenize::TokenizerRegistry> tokenizers_;  // before api_: it points here
  std::unique_ptr<epp::EppServer> epp_;
  // The picker's load signals: core NATS (--nats) or its own scrapes.
  std::unique_ptr<LoadFeed> load_feed_;
  std::unique_ptr<epp::LoadScraper> load_scraper_;
  // Predict on route: fed by the apply loop, read by the picker.
  std::shared_ptr<epp::SpeculativeCache> speculative_;
  // --sglang-indexer: SGLang's hashes -> ours, fed by the apply loop
  // (before api_: its metrics are among api_'s collectables).
  std::shared_ptr<compat::SglangAliasMap> sglang_aliases_;
  std::shared_ptr<metrics::CallbackCollectable> sglang_alias_metrics_;
  std::unique_ptr<query::RouterApi> api_;
  std::unique_ptr<SglangBridgeIngest> sglang_bridge_;  // --sglang-ingest
  std::unique_ptr<SglangService> sglang_;              // after api_ and the bridge: it uses both
  std::unique_ptr<http::Server> server_;
  // Returns the heap a catch-up burst (queued JetStream messages) left free.
  std::unique_ptr<metrics::HeapTrimmer> heap_trimmer_;
  storage::RestoreResult restored_;
  bool running_ = false;
  std::thread stream_watch_;
  StopSignal stream_stop_;
  // 0: fine (or unknown yet), 1: the stream does not exist, 2: recreated.
  std::atomic<int> stream_state_{0};
  std::atomic<int64_t> stream_created_ns_{0};
  std::atomic<int64_t> stream_seen_created_ns_{0};
};

}  // namespace kvindex::router
