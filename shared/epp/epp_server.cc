#include "shared/epp/epp_server.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

#include "absl/synchronization/mutex.h"

#include "shared/epp/tls_credentials.h"
#include "shared/log/log.h"

namespace kvindex::epp {

EppServer::EppServer(EppOptions options, const index::IndexInterface* index,
                     std::function<bool()> ready)
    : options_(std::move(options)),
      index_(index),
      ready_(std::move(ready)),
      load_(options_.load_max_age) {
  speculative_ = options_.speculative ? options_.speculative
                                      : std::make_shared<SpeculativeCache>(SpeculativeOptions{
                                            .ttl = std::chrono::milliseconds(0)});
  collectable_ = std::make_shared<metrics::CallbackCollectable>([this] { return Collect(); });
}

EppServer::~EppServer() { Stop(); }

Status EppServer::Start() {
#ifdef NDEBUG
  // gRPC's locks are absl::Mutex, and Debian's absl is built with deadlock
  // detection on: every lock and unlock then updates a global lock graph
  // (GraphCycles, under its own global lock). A release build does not pay
  // for a debugging aid (docs/benchmarks.md, "Endpoint picker").
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  PickerConfig config;
  if (!options_.config_path.empty()) {
    std::ifstream in(options_.config_path);
    if (!in) return absl::NotFoundError("cannot read --epp-config '" + options_.config_path + "'");
    std::stringstream text;
    text << in.rdbuf();
    KVINDEX_ASSIGN_OR_RETURN(config, ParsePickerConfig(text.str()));
  }
  endpoints_.SetStatic(options_.static_endpoints);
  if (options_.announced) endpoints_.SetAnnounced(options_.announced);
  if (!options_.endpoints_file.empty()) {
    KVINDEX_RETURN_IF_ERROR(endpoints_.SetFile(options_.endpoints_file));
  }
  KVINDEX_ASSIGN_OR_RETURN(tokens_, BuildTokenChain(options_.tokens));
  speculative_->Configure(config.speculative);
  picker_ = std::make_unique<Picker>(std::move(config), index_, &endpoints_, &load_);
  picker_->SetSpeculative(speculative_.get());
  // A render call waits up to --render-timeout: never on gRPC's threads.
  service_ = std::make_unique<ExtProcService>(options_.service, picker_.get(), tokens_.get(),
                                              tokens_->MayBlock() ? kBlockingThreads : 0);
  health_ = std::make_unique<HealthService>(ready_);
  {
    if (options_.tls_cert.empty() != options_.tls_key.empty()) {
      return absl::InvalidArgumentError("--epp-tls-cert and --epp-tls-key go together");
    }
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (!options_.tls_cert.empty()) {
      KVINDEX_ASSIGN_OR_RETURN(credentials,
                               WatchedTlsCredentials(options_.tls_cert, options_.tls_key));
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen, credentials, &port_);
    // A message past the body limit (plus framing) ends the stream.
    builder.SetMaxReceiveMessageSize(static_cast<int>(
        std::min<size_t>(options_.service.max_body_bytes + (64 << 10), INT32_MAX)));
    builder.RegisterService(service_.get());
    builder.RegisterService(health_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError("--epp: cannot listen on '" + options_.listen + "'");
    }
  }
  if (!options_.health_listen.empty()) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.health_listen, grpc::InsecureServerCredentials(),
                             &health_port_);
    builder.RegisterService(health_.get());
    health_server_ = builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      return absl::UnavailableError("--epp-health: cannot listen on '" + options_.health_listen +
                                    "'");
    }
  }
  started_.store(true, std::memory_order_release);
  log::Get("router")->info(
      "endpoint picker (ext_proc{}) on port {}{}", options_.tls_cert.empty() ? "" : ", TLS", port_,
      health_port_ != 0 ? " (health also on " + std::to_string(health_port_) + ")" : std::string());
  return absl::OkStatus();
}

void EppServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (health_) health_->Shutdown();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  if (server_) server_->Shutdown(deadline);
  if (health_server_) health_server_->Shutdown(deadline);
  server_.reset();
  health_server_.reset();
}

std::vector<prometheus::MetricFamily> EppServer::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  if (!started_.load(std::memory_order_acquire)) return out;
  const ServiceCounters& c = service_->counters();
  auto streams = metrics::CounterFamily("kvindex_router_epp_streams_total",
                                        "ext_proc streams ended, by how they ended");
  const char* ends[] = {"complete", "immediate", "cancelled", "no_body", "oversize", "empty"};
  for (int i = 0; i < ServiceCounters::kNumEnds; ++i) {
    metrics::AddSample(streams, static_cast<double>(c.streams_ended[i].load()), {{"end", ends[i]}});
  }
  out.push_back(std::move(streams));
  auto picks = metrics::CounterFamily(
      "kvindex_router_epp_picks_total",
      "Endpoint picks: scored with the request's prefix, or load-only (no tokens)");
  metrics::AddSample(picks, static_cast<double>(c.picks_prefix.load()), {{"kind", "prefix"}});
  metrics::AddSample(picks, static_cast<double>(c.picks_load_only.load()), {{"kind", "load_only"}});
  out.push_back(std::move(picks));
  auto immediate = metrics::CounterFamily("kvindex_router_epp_immediate_responses_total",
                                          "ImmediateResponse answers, by HTTP status");
  metrics::AddSample(immediate, static_cast<double>(c.immediate_400.load()), {{"code", "400"}});
  metrics::AddSample(immediate, static_cast<double>(c.immediate_413.load()), {{"code", "413"}});
  metrics::AddSample(immediate, static_cast<double>(c.immediate_429.load()), {{"code", "429"}});
  metrics::AddSample(immediate, static_cast<double>(c.immediate_503.load()), {{"code", "503"}});
  out.push_back(std::move(immediate));
  auto failures = metrics::CounterFamily("kvindex_router_epp_request_failures_total",
                                         "Requests picked load-only or refused, by reason");
  metrics::AddSample(failures, static_cast<double>(c.parse_failures.load()), {{"reason", "parse"}});
  metrics::AddSample(failures, static_cast<double>(c.token_failures.load()),
                     {{"reason", "tokens"}});
  metrics::AddSample(failures, static_cast<double>(c.oversize_passthrough.load()),
                     {{"reason", "oversize_passthrough"}});
  out.push_back(std::move(failures));
  auto served = metrics::CounterFamily(
      "kvindex_router_epp_served_total",
      "Responses whose served endpoint the gateway reported: the pick, a fallback, or another");
  metrics::AddSample(served, static_cast<double>(c.served_pick.load()), {{"result", "pick"}});
  metrics::AddSample(served, static_cast<double>(c.served_fallback.load()),
                     {{"result", "fallback"}});
  metrics::AddSample(served, static_cast<double>(c.served_other.load()), {{"result", "other"}});
  out.push_back(std::move(served));
  auto tokens = metrics::CounterFamily("kvindex_router_epp_token_sources_total",
                                       "Token source answers, by source and outcome");
  for (const TokenChain::SourceCounts& s : tokens_->Counts()) {
    metrics::AddSample(tokens, static_cast<double>(s.tokens),
                       {{"source", s.name}, {"outcome", "tokens"}});
    metrics::AddSample(tokens, static_cast<double>(s.skipped),
                       {{"source", s.name}, {"outcome", "skip"}});
    metrics::AddSample(tokens, static_cast<double>(s.failed),
                       {{"source", s.name}, {"outcome", "failed"}});
  }
  out.push_back(std::move(tokens));
  const SpeculativeCounters& sc = speculative_->counters();
  auto spec_blocks = metrics::CounterFamily(
      "kvindex_router_epp_speculative_blocks_total",
      "Predict on route: (block, source) entries recorded after picks, dropped because the cache "
      "was full, purged past their TTL");
  metrics::AddSample(spec_blocks, static_cast<double>(sc.recorded.load()),
                     {{"outcome", "recorded"}});
  metrics::AddSample(spec_blocks, static_cast<double>(sc.dropped_full.load()),
                     {{"outcome", "dropped_full"}});
  metrics::AddSample(spec_blocks, static_cast<double>(sc.expired.load()), {{"outcome", "expired"}});
  out.push_back(std::move(spec_blocks));
  auto spec_invalidated =
      metrics::CounterFamily("kvindex_router_epp_speculative_invalidations_total",
                             "Predict on route: (model, source) speculative entries dropped by a "
                             "removal, clear or expiry");
  metrics::AddSample(spec_invalidated, static_cast<double>(sc.invalidated.load()));
  out.push_back(std::move(spec_invalidated));
  auto spec_picks = metrics::CounterFamily(
      "kvindex_router_epp_speculative_picks_total",
      "Picks whose endpoint held more of the prefix speculatively than in the index");
  metrics::AddSample(spec_picks, static_cast<double>(sc.picks.load()));
  out.push_back(std::move(spec_picks));
  auto spec_entries = metrics::GaugeFamily("kvindex_router_epp_speculative_entries",
                                           "Predict on route: speculative entries held");
  metrics::AddSample(spec_entries, static_cast<double>(speculative_->size()));
  out.push_back(std::move(spec_entries));
  auto open = metrics::GaugeFamily("kvindex_router_epp_streams_open", "ext_proc streams open now");
  metrics::AddSample(open, static_cast<double>(c.streams_open.load()));
  out.push_back(std::move(open));
  auto endpoints =
      metrics::GaugeFamily("kvindex_router_epp_endpoints", "Endpoints known to the picker");
  metrics::AddSample(endpoints, static_cast<double>(endpoints_.Snapshot()->endpoints.size()));
  out.push_back(std::move(endpoints));
  auto announced = metrics::GaugeFamily(
      "kvindex_router_epp_endpoints_announced",
      "Endpoints the picker learned from the agents' heartbeats on the log (--nats)");
  metrics::AddSample(announced, static_cast<double>(endpoints_.announced()));
  out.push_back(std::move(announced));
  auto load = metrics::CounterFamily(
      "kvindex_router_epp_load_samples_total",
      "Engine load samples: received, refused (sender does not own the source, or "
      "undecodable), stale (older than --load-max-age when a pick wanted it)");
  metrics::AddSample(load, static_cast<double>(load_.updates()), {{"outcome", "received"}});
  metrics::AddSample(load, static_cast<double>(load_refused_.load()), {{"outcome", "refused"}});
  metrics::AddSample(load, static_cast<double>(load_.stale()), {{"outcome", "stale"}});
  out.push_back(std::move(load));
  return out;
}

}  // namespace kvindex::epp
