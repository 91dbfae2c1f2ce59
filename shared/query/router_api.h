// RouterApi: the HTTP handlers of kvindex-router (docs/api.md, with
// examples):
//   POST /v1/match   per-source prefix match (semantics.md section 5)
//   the compatibility APIs (compat_api.h, docs/compat.md): Mooncake's
//   indexer API and Dynamo's remote indexer
//   GET  /v1/state   applied_seq, digest, entries per tier, sources, ready,
//                    models (held, configured or seen in events)
//   GET  /v1/workers sources with model, agent, entries per tier, last event
//   GET  /healthz, /readyz, /metrics
//
// Handlers only read: the index from the calling HTTP thread, the apply
// loop's activity table, the probe. Errors are {"error": "..."} with 4xx.
//
// Thread safety: Register() once before the server starts; handlers run
// concurrently on the server's threads.
#pragma once

#include <prometheus/registry.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shared/consume/apply_loop.h"
#include "shared/consume/router_probe.h"
#include "shared/http/server.h"
#include "shared/index/index_interface.h"
#include "shared/model/ingest_status.h"
#include "shared/query/compat_api.h"
#include "shared/query/engine_registry.h"
#include "shared/query/match_request.h"
#include "shared/tokenize/registry.h"

namespace kvindex::query {

// A source's speculative prefix (predict on route, docs/epp.md): the
// request's leading blocks this replica's endpoint picker recently sent to
// it. Never in the index, the digest or `workers`.
struct SpeculativeRow {
  SourceKey source;
  uint32_t blocks = 0;
};

// Appends the body of a /v1/match answer (docs/api.md) to *out. Also the
// simulated cluster's truth API, so both answer in the same bytes.
// `tokens` >= 0 adds "tokens": n (the request gave "text"). `speculative`
// not empty adds "speculative": [{"worker", "dp_rank", "blocks"}...].
void WriteMatchResponse(std::string_view model, const index::MatchResult& result, std::string* out,
                        int64_t tokens = -1, std::span<const SpeculativeRow> speculative = {});

// The endpoint picker's speculative entries as /v1/match reads them
// (services/router wires epp::SpeculativeCache in).
struct SpeculativeHook {
  // Whether any entry is held at all (cheap; false: nothing to look up).
  std::function<bool()> any;
  // Per source, the leading blocks of `seq_hashes` held speculatively now.
  std::function<void(std::string_view model, std::span<const uint64_t> seq_hashes,
                     std::vector<SpeculativeRow>* rows)>
      prefixes;
};

struct ApiOptions {
  // /metrics requires the bearer token (when one is configured). Default: false.
  bool metrics_auth = false;
  // Readiness bound (--ready-max-lag): once caught up with the log as it was
  // at start, a router stays ready while it is at most this many log
  // positions behind the log's end (messages with --nats, events in
  // --embedded mode); 0 = no bound. Default: 100000.
  uint64_t ready_max_lag = 100000;
};

struct ApiContext {
  const index::IndexInterface* index = nullptr;  // required
  const consume::ApplyLoop* apply = nullptr;     // required
  consume::RouterProbe* probe = nullptr;         // nullable
  prometheus::Registry* registry = nullptr;      // nullable: /metrics empty
  // Ingest readiness (embedded pipeline Ready()); null = always ready.
  std::function<bool()> ingest_ready;
  // Ingest per-source status; null = none.
  std::function<std::vector<IngestSourceStatus>()> ingest_sources;
  // Models configured on the ingest side (--source), with their block size.
  // A match on one of them before any of its events arrived answers 200 with
  // no workers instead of 404 (the model exists, nothing is cached yet).
  std::vector<std::pair<std::string, uint32_t>> configured_models;
  // The newest verified checkpoint, exported for a new replica (GET
  // /v1/checkpoint, storage::Checkpointer::ExportNewest); null = no route.
  std::function<StatusOr<std::string>(uint64_t* applied_seq)> checkpoint;
  // Whether the log can be trusted now (JetStream: the stream exists and is
  // the one this router applied); false fills *reason. Null = always.
  std::function<bool(std::string* reason)> log_ready;
  // More families for /metrics, collected at scrape time (e.g. the endpoint
  // picker's); each must outlive the API.
  std::vector<const prometheus::Collectable*> extra_collectables;
  // Tokenizers for /v1/match "text" (--tokenizer MODEL=DIR); nullable.
  const tokenize::TokenizerRegistry* tokenizers = nullptr;
  // Predict on route's entries (--epp), shown apart in /v1/match; unset = none.
  SpeculativeHook speculative;
  // Mooncake /register and /unregister (an embedded router's registered
  // engines); null = refused with 409 naming the flags (--nats routers).
  EngineRegistry* registrations = nullptr;
};

// Runs the lookup of a parsed request: the one match path behind /v1/match
// and every compatibility API (compat_api.h); records the latency on the
// probe under `endpoint`. A model that is configured but has no events yet
// matches nothing (200, no workers). With `speculative` and entries held
// (ApiContext::speculative), also the sources holding the request's leading
// blocks speculatively, from the same sequence hashes (sorted: blocks desc,
// worker, dp_rank; empty when none).
StatusOr<index::MatchResult> Lookup(const ApiContext& context, const MatchRequest& req,
                                    consume::Endpoint endpoint,
                                    std::vector<SpeculativeRow>* speculative = nullptr);

class RouterApi {
 public:
  RouterApi(ApiOptions options, ApiContext context);

  void Register(http::Server& server);

  // Ready = ingest ready, the apply loop caught up with the log as it was at
  // start, and no more than ready_max_lag positions behind its end since;
  // *reason says why not.
  bool Ready(std::string* reason) const;

  // The compatibility APIs' handlers and counters (compat_api.h).
  const CompatApi& compat() const { return compat_; }
  // What the handlers read (the gRPC compatibility services run Lookup on it).
  const ApiContext& context() const { return context_; }

  // Handlers (public for tests).
  void Match(const http::Request& request, http::Response& response) const;
  void Checkpoint(const http::Request& request, http::Response& response) const;
  void State(const http::Request& request, http::Response& response) const;
  void Workers(const http::Request& request, http::Response& response) const;
  void Readyz(const http::Request& request, http::Response& response) const;
  void Metrics(const http::Request& request, http::Response& response) const;

 private:
  // Models the router knows, sorted: those the index holds entries of, the
  // configured ones (--source) and those named by any applied event.
  std::vector<std::string> KnownModels() const;

  const ApiOptions options_;
  const ApiContext context_;
  CompatApi compat_;
};

}  // namespace kvindex::query
