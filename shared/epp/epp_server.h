// EppServer: the endpoint picker's gRPC servers (docs/epp.md): the
// ext_proc service and grpc.health.v1.Health on --epp, Health alone on
// --epp-health (TLS on --epp with --epp-tls-cert/--epp-tls-key). Health services "",
// envoy.service.ext_proc.v3. ExternalProcessor and "readiness" are SERVING when `ready` says so
// (the router's /readyz: ingest ready and the log caught up), "liveness" while the process runs
// (health_service.h).
//
//   EppServer server(options, &index, [&] { return router_ready(); });
//   KVINDEX_RETURN_IF_ERROR(server.Start());
//   ... server.port(), server.health_port() ...
//   server.Stop();
//
// Thread safety: Start/Stop from one thread; the rest runs on gRPC's threads.
#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/epp/endpoints.h"
#include "shared/epp/ext_proc_service.h"
#include "shared/epp/health_service.h"
#include "shared/epp/load_table.h"
#include "shared/epp/picker.h"
#include "shared/epp/speculative.h"
#include "shared/epp/token_source.h"
#include "shared/index/index_interface.h"
#include "shared/metrics/metrics.h"

namespace grpc {
class Server;
}

namespace kvindex::epp {

struct EppOptions {
  // --epp host:port (port 0 = any free port). "" = off.
  std::string listen;
  // --epp-health host:port; "" = none (health is on --epp's port too).
  std::string health_listen;
  // --epp-tls-cert / --epp-tls-key: PEM certificate chain and private key;
  // both set = TLS on --epp (not on --epp-health: kubelet's gRPC probes
  // speak cleartext), re-read when the files change (tls_credentials.h).
  std::string tls_cert;
  std::string tls_key;
  ServiceOptions service;
  TokenChainOptions tokens;
  // --epp-config: YAML of PickerConfig (picker.h); "" = defaults.
  std::string config_path;
  // --endpoints-file; "" = none.
  std::string endpoints_file;
  // Endpoints from --source endpoint=...
  std::vector<Endpoint> static_endpoints;
  // Endpoints announced on the log (--nats: the live sources' endpoints
  // from their agents' heartbeats); none when unset.
  std::function<std::vector<Endpoint>()> announced;
  // --load-max-age: a load sample older than this is not used. Default: 1 s.
  std::chrono::milliseconds load_max_age{1000};
  // Predict on route: the cache the apply loop feeds (OnApplied); null =
  // the server makes its own (no contradicting events reach it: tests and
  // benchmarks). Configured from --epp-config at Start.
  std::shared_ptr<SpeculativeCache> speculative;
};

class EppServer {
 public:
  // Threads that handle the request side when a token source may block
  // (--render-url): render calls in flight at once.
  static constexpr int kBlockingThreads = 8;

  EppServer(EppOptions options, const index::IndexInterface* index, std::function<bool()> ready);
  ~EppServer();
  EppServer(const EppServer&) = delete;
  EppServer& operator=(const EppServer&) = delete;

  Status Start();
  void Stop();

  int port() const { return port_; }
  int health_port() const { return health_port_; }
  // The kvindex_router_epp_* families, collected at scrape time.
  const prometheus::Collectable* collectable() const { return collectable_.get(); }
  const ServiceCounters* counters() const { return service_ ? &service_->counters() : nullptr; }
  // The engines' load the picker scores with (fed by the router: core NATS
  // or, embedded, its own scraper).
  LoadTable* load() { return &load_; }
  // Load reports refused (a sample for a source its sender does not own, or
  // undecodable); counted here, shown in /metrics.
  void CountLoadRefused() { load_refused_.fetch_add(1, std::memory_order_relaxed); }
  const SpeculativeCache& speculative() const { return *speculative_; }

 private:
  std::vector<prometheus::MetricFamily> Collect() const;

  EppOptions options_;
  const index::IndexInterface* const index_;
  const std::function<bool()> ready_;
  EndpointTable endpoints_;
  LoadTable load_;
  std::atomic<uint64_t> load_refused_{0};
  std::unique_ptr<TokenChain> tokens_;
  std::shared_ptr<SpeculativeCache> speculative_;
  std::unique_ptr<Picker> picker_;
  std::unique_ptr<ExtProcService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::Server> health_server_;
  std::shared_ptr<metrics::CallbackCollectable> collectable_;
  std::atomic<bool> started_{false};
  int port_ = 0;
  int health_port_ = 0;
  std::atomic<bool> stopping_{false};
};

}  // namespace kvindex::epp
