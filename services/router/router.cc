#include "services/router/router.h"

#include <filesystem>
#include <system_error>
#include <utility>

namespace kvindex::router {

Status RouterOptions::Validate() const {
  if (data_dir.empty()) return absl::InvalidArgumentError("--data-dir is required");
  if (!embedded) {
    return absl::UnimplementedError(
        "JetStream consumption (--nats without --embedded) is not implemented yet; run "
        "kvindex-router --embedded --source ... for a single node");
  }
  if (agent.sources.empty()) {
    return absl::InvalidArgumentError("--embedded needs at least one --source");
  }
  http::ServerOptions server;
  server.listen = http;
  server.threads = http_threads;
  server.max_body_bytes = max_body_bytes;
  KVINDEX_RETURN_IF_ERROR(server.Validate());
  if (log_capacity == 0) return absl::InvalidArgumentError("log capacity must be > 0");
  return agent.Validate();
}

Router::Router(RouterOptions options) : options_(std::move(options)) {}

Router::~Router() { Stop(); }

Status Router::Start() {
  if (running_) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(options_.Validate());

  std::error_code ec;
  std::filesystem::create_directories(options_.data_dir, ec);
  if (ec || !std::filesystem::is_directory(options_.data_dir)) {
    return absl::FailedPreconditionError("cannot create --data-dir '" + options_.data_dir +
                                         "': " + (ec ? ec.message() : "not a directory"));
  }

  // Fresh state on every Start: without checkpoints the index is rebuilt
  // from the engines' replay buffers. Tear down the previous run's
  // components in reverse order first (they point at each other).
  server_.reset();
  api_.reset();
  ingest_.reset();
  apply_.reset();
  reader_.reset();
  sink_.reset();
  index_.reset();
  probe_.reset();
  registry_.reset();
  registry_ = std::make_shared<prometheus::Registry>();
  probe_ = std::make_unique<consume::RouterProbe>();
  index_ = std::make_unique<index::KvIndex>();
  sink_ = std::make_unique<InProcessSink>(options_.log_capacity);
  InProcessSink* sink = sink_.get();
  probe_->Bind(index_.get(), [this] { return apply_ ? apply_->Pending() : 0; });

  consume::ApplyOptions apply_options;
  apply_options.models = options_.models;
  reader_ = std::make_unique<consume::InProcessLogReader>(sink);
  apply_ = std::make_unique<consume::ApplyLoop>(reader_.get(), index_.get(), probe_.get(),
                                                apply_options);
  KVINDEX_RETURN_IF_ERROR(apply_->Start());

  ingest_ = std::make_unique<EmbeddedIngest>(options_.agent, sink, registry_.get());
  if (Status status = ingest_->Start(); !status.ok()) {
    apply_->Stop();
    return status;
  }

  query::ApiContext context;
  context.index = index_.get();
  context.apply = apply_.get();
  context.probe = probe_.get();
  context.registry = registry_.get();
  EmbeddedIngest* ingest = ingest_.get();
  context.ingest_ready = [ingest] { return ingest->Ready(); };
  context.ingest_sources = [ingest] { return ingest->Sources(); };
  for (const ingest::SourceSpec& spec : options_.agent.sources) {
    bool seen = false;
    for (const auto& [model, unused] : context.configured_models) seen |= model == spec.model;
    if (!seen) context.configured_models.emplace_back(spec.model, spec.block_size);
  }
  query::ApiOptions api_options;
  api_options.metrics_auth = options_.metrics_auth;
  api_ = std::make_unique<query::RouterApi>(api_options, std::move(context));

  http::ServerOptions server_options;
  server_options.listen = options_.http;
  server_options.threads = options_.http_threads;
  server_options.max_body_bytes = options_.max_body_bytes;
  server_options.bearer_token = options_.auth_token;
  server_ = std::make_unique<http::Server>(server_options);
  api_->Register(*server_);
  if (Status status = server_->Start(); !status.ok()) {
    ingest_->Stop();
    apply_->Stop();
    return status;
  }
  running_ = true;
  return absl::OkStatus();
}

void Router::Stop() {
  if (!running_) return;
  server_->Stop();
  ingest_->Stop();
  apply_->Stop();
  sink_->Close();
  running_ = false;
}

}  // namespace kvindex::router
