#include "services/router/router.h"

#include "shared/base/strings.h"
#include "shared/codec/placement_codec.h"
#include "shared/consume/filtered_log_reader.h"
#include "shared/consume/jetstream_log_reader.h"
#include "shared/consume/next_by_subject.h"
#include "shared/http/client.h"
#include "shared/log/log.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

namespace kvindex::router {

Status RouterOptions::Validate() const {
  if (data_dir.empty()) return absl::InvalidArgumentError("--data-dir is required");
  if (!embedded) {
    if (nats.url.empty()) {
      return absl::InvalidArgumentError("give --nats URL (replicated) or --embedded (single node)");
    }
    if (!agent.sources.empty()) {
      return absl::InvalidArgumentError("--source needs --embedded (with --nats, agents publish)");
    }
    KVINDEX_RETURN_IF_ERROR(nats.Validate());
    KVINDEX_RETURN_IF_ERROR(stream.Validate());
  } else if (agent.sources.empty() && max_registrations == 0) {
    return absl::InvalidArgumentError(
        "--embedded needs at least one --source (or engines registered over HTTP: "
        "--max-registrations > 0)");
  }
  if (filter_subjects && (embedded || models.empty())) {
    return absl::InvalidArgumentError("--filter-subjects needs --nats and --models");
  }
  KVINDEX_RETURN_IF_ERROR(HttpOptions().Validate());
  if (sglang_ingest && (!embedded || sglang_listen.empty())) {
    return absl::InvalidArgumentError(
        "--sglang-ingest needs --embedded and --sglang-indexer (with --nats, engines' events "
        "reach routers through kvindex-agent --source ...)");
  }
  if (log_capacity == 0) return absl::InvalidArgumentError("log capacity must be > 0");
  if (max_nodes < 1 || max_nodes > kMaxNodesLimit) {
    return absl::InvalidArgumentError(
        strings::Cat("--max-nodes: must be between 1 and ", kMaxNodesLimit, " (got ", max_nodes,
                     "): each live node is guaranteed a share of a model's 4096 sources"));
  }
  if (embedded && agent.sources.empty()) {
    // Only registered engines: the rest of the agent options still apply.
    ingest::AgentOptions checked = agent;
    ingest::SourceSpec& placeholder = checked.sources.emplace_back();
    placeholder.worker = placeholder.model = "-";
    placeholder.block_size = 1;
    placeholder.pub_endpoint = "tcp://127.0.0.1:1";
    return checked.Validate();
  }
  return embedded ? agent.Validate() : absl::OkStatus();
}

http::ServerOptions RouterOptions::HttpOptions() const {
  http::ServerOptions server;
  server.listen = http;
  server.backend = http_backend;
  server.threads = http_threads;
  server.max_body_bytes = max_body_bytes;
  server.max_connections = http_max_connections;
  server.max_body_total_bytes = http_max_body_total_bytes;
  server.max_connections_per_client = http_max_connections_per_client;
  auto ms = [](std::chrono::milliseconds d) {
    return static_cast<uint32_t>(std::clamp<int64_t>(d.count(), 0, UINT32_MAX));
  };
  server.idle_timeout_ms = ms(http_idle_timeout);
  server.header_timeout_ms = ms(http_header_timeout);
  server.body_timeout_ms = ms(http_body_timeout);
  server.bearer_token = auth_token;
  return server;
}

namespace {

StatusOr<storage::StreamIdentity> StreamIdentityOf(jsCtx* js, const std::string& name) {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  jsOptions options;
  jsOptions_Init(&options);
  options.Wait = 2000;
  const natsStatus status = js_GetStreamInfo(&info, js, name.c_str(), &options, &code);
  if (status != NATS_OK) {
    return nats::FromNats(status, strings::Cat("stream info of '", name, "'"), code);
  }
  storage::StreamIdentity identity{name, info->Created, info->State.LastSeq};
  jsStreamInfo_Destroy(info);
  return identity;
}

}  // namespace

Router::Router(RouterOptions options) : options_(std::move(options)) {}

Router::~Router() { Stop(); }

Status Router::Start() {
  if (running_) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(options_.Validate());
  if (tokenizers_ == nullptr) {
    KVINDEX_ASSIGN_OR_RETURN(tokenizers_, tokenize::TokenizerRegistry::Load(options_.tokenizers));
  }

  std::error_code ec;
  std::filesystem::create_directories(options_.data_dir, ec);
  if (ec || !std::filesystem::is_directory(options_.data_dir)) {
    return absl::FailedPreconditionError("cannot create --data-dir '" + options_.data_dir +
                                         "': " + (ec ? ec.message() : "not a directory"));
  }

  // Every Start restores from the newest checkpoint into a fresh index.
  // Tear down the previous run's components in reverse order first (they
  // point at each other).
  server_.reset();
  sglang_.reset();
  if (registered_) registered_->SetBridgeWorkers(nullptr);  // it asks the bridge
  sglang_bridge_.reset();
  api_.reset();
  registered_.reset();
  ingest_.reset();
  liveness_.reset();
  checkpointer_.reset();
  apply_.reset();
  reader_.reset();
  connection_.reset();
  sink_.reset();
  index_.reset();
  probe_.reset();
  registry_.reset();
  registry_ = std::make_shared<prometheus::Registry>();
  probe_ = std::make_unique<consume::RouterProbe>();
  index_ = std::make_unique<index::KvIndex>(index::KvIndexOptions{
      .max_model_bytes = options_.max_model_bytes, .max_models = options_.max_models});
  probe_->Bind(index_.get(), [this] { return apply_ ? apply_->Pending() : 0; });
  consume::ApplyOptions apply_options;
  apply_options.models = options_.models;
  apply_options.agents.max_nodes = options_.max_nodes;
  if (!options_.epp.listen.empty()) {
    // The picker's speculative entries learn of removals from the log.
    speculative_ = std::make_shared<epp::SpeculativeCache>(
        epp::SpeculativeOptions{.ttl = std::chrono::milliseconds(0)});
    apply_options.on_applied = [cache = speculative_](std::span<const PlacementEvent> events) {
      cache->OnApplied(events);
    };
  }
  sglang_aliases_.reset();
  if (!options_.sglang_listen.empty()) {
    // sgl-router's own hashes, learned from the agents' events (docs/compat.md).
    sglang_aliases_ = std::make_shared<compat::SglangAliasMap>(index_.get());
    index_->set_departure_observer(sglang_aliases_->departure_observer());
    apply_options.on_applied = [aliases = sglang_aliases_, then = apply_options.on_applied](
                                   std::span<const PlacementEvent> events) {
      if (then) then(events);
      aliases->OnApplied(events);
    };
  }

  if (options_.embedded) {
    sink_ = std::make_unique<InProcessSink>(options_.log_capacity);
    reader_ = std::make_unique<consume::InProcessLogReader>(sink_.get());
  } else {
    // A NATS server that is down at start is retried in the background; the
    // apply loop opens the stream (creating it if missing) once it answers.
    // Refused credentials never stop the router: a new connection is dialled
    // with every secret file read again (not ready meanwhile).
    nats::NatsOptions nats_options = options_.nats;
    nats_options.keep_trying_auth = true;
    KVINDEX_ASSIGN_OR_RETURN(connection_,
                             nats::Connection::Connect(nats_options, registry_.get(), "router", {},
                                                       /*retry_initial=*/true));
    consume::JetStreamLogOptions log_options;
    log_options.stream = options_.stream.name;
    log_options.subjects = options_.stream.subjects.All();
    nats::Connection* connection = connection_.get();
    jsCtx* js = connection->jetstream();
    log_options.current_js = [connection] { return connection->jetstream(); };
    const nats::StreamOptions stream = options_.stream;
    log_options.prepare = [connection, stream] {
      return nats::EnsureStream(connection->jetstream(), stream);
    };
    if (options_.filter_subjects) {
      consume::FilteredLogOptions filtered;
      filtered.subjects = consume::FilterSubjects(options_.stream.subjects, options_.models);
      filtered.log = std::move(log_options);
      filtered.next_by_subject = [connection, name = stream.name](uint64_t seq,
                                                                  const std::string& subject) {
        return consume::NextBySubject(connection->raw(), name, seq, subject);
      };
      filtered.stream_last = [connection, name = stream.name]() -> StatusOr<uint64_t> {
        KVINDEX_ASSIGN_OR_RETURN(nats::StreamState state,
                                 nats::GetStreamState(connection->jetstream(), name));
        return state.last_seq;
      };
      reader_ = std::make_unique<consume::FilteredLogReader>(js, std::move(filtered));
    } else {
      reader_ = std::make_unique<consume::JetStreamLogReader>(js, std::move(log_options));
    }
  }
  apply_ = std::make_unique<consume::ApplyLoop>(reader_.get(), index_.get(), probe_.get(),
                                                apply_options);
  storage::CheckpointerOptions checkpoint_options;
  checkpoint_options.dir = (std::filesystem::path(options_.data_dir) / "checkpoints").string();
  checkpoint_options.interval = options_.checkpoint_interval;
  if (!options_.embedded) {
    // Checkpoints carry the stream's identity; one from another stream, or
    // past its end, is not restored (storage/checkpointer.h).
    nats::Connection* connection = connection_.get();
    checkpoint_options.stream_identity = [connection, name = options_.stream.name] {
      return StreamIdentityOf(connection->jetstream(), name);
    };
  }
  checkpointer_ = std::make_unique<storage::Checkpointer>(checkpoint_options, apply_.get(),
                                                          index_.get(), registry_.get());
  if (sglang_aliases_) {
    checkpointer_->SetAliases(std::make_shared<SglangAliasCheckpoint>(sglang_aliases_));
  }
  if (!options_.bootstrap_from.empty() && !checkpointer_->HasCheckpoint()) Bootstrap();
  if (options_.cancel != nullptr && options_.cancel->load()) {
    return absl::CancelledError("start cancelled by a signal");
  }
  KVINDEX_ASSIGN_OR_RETURN(restored_, checkpointer_->Restore(&apply_->agents()));
  if (options_.embedded) {
    ingest_ = std::make_unique<EmbeddedIngest>(options_.agent, sink_.get(), registry_.get());
    RegisteredEnginesOptions registered;
    registered.base = options_.agent;
    registered.configured = options_.agent.sources;
    registered.max_registrations = options_.max_registrations;
    registered.state_file =
        (std::filesystem::path(options_.data_dir) / "registrations.json").string();
    registered.model_block_size = [index = index_.get()](const std::string& model) {
      return index->BlockSize(model);
    };
    registered_ =
        std::make_unique<RegisteredEngines>(std::move(registered), sink_.get(), registry_.get());
    // The sources continue where the checkpoint left them (their placements
    // up to its position are in the restored index).
    if (!restored_.ingest.empty()) {
      ingest_->SetResumeStates(std::move(restored_.ingest), index_.get(),
                               registered_->SavedInstances());
      restored_.ingest.clear();
    }
    checkpointer_->SetIngest(ingest_.get());
  }
  KVINDEX_RETURN_IF_ERROR(apply_->Start());
  checkpointer_->Start();

  if (options_.embedded) {
    Status status = ingest_->Start();
    if (status.ok()) status = registered_->Start();
    if (!status.ok()) {
      registered_->Stop();
      ingest_->Stop();
      checkpointer_->Stop();
      apply_->Stop();
      return status;
    }
  } else {
    nats::Connection* connection = connection_.get();
    const nats::SubjectScheme subjects = options_.stream.subjects;
    auto append = [connection, subjects](const std::string& agent, const std::string& msg_id,
                                         const std::vector<PlacementEvent>& events) -> Status {
      std::string data;
      codec::EncodePlacementBatch(events, &data);
      jsPubOptions pub;
      jsPubOptions_Init(&pub);
      pub.MsgId = msg_id.c_str();
      jsPubAck* ack = nullptr;
      jsErrCode code = static_cast<jsErrCode>(0);
      const natsStatus status =
          js_Publish(&ack, connection->jetstream(), subjects.Expire(agent).c_str(), data.data(),
                     static_cast<int>(data.size()), &pub, &code);
      jsPubAck_Destroy(ack);
      return status == NATS_OK ? absl::OkStatus()
                               : nats::FromNats(status, "append to the control subject", code);
    };
    liveness_ = std::make_unique<consume::LivenessMonitor>(
        apply_.get(), probe_.get(), std::move(append),
        consume::LivenessOptions{.interval = options_.liveness_interval,
                                 .max_lease = options_.max_lease});
    liveness_->Start();
  }

  query::ApiContext context;
  context.checkpoint = [checkpointer = checkpointer_.get()](uint64_t* applied_seq) {
    return checkpointer->ExportNewest(applied_seq);
  };
  context.index = index_.get();
  context.apply = apply_.get();
  context.probe = probe_.get();
  context.registry = registry_.get();
  context.tokenizers = tokenizers_.get();
  if (EmbeddedIngest* ingest = ingest_.get()) {
    RegisteredEngines* registered = registered_.get();
    context.ingest_ready = [ingest, registered] { return ingest->Ready() && registered->Ready(); };
    context.ingest_sources = [ingest, registered] {
      std::vector<IngestSourceStatus> sources = ingest->Sources();
      for (IngestSourceStatus& s : registered->Sources()) sources.push_back(std::move(s));
      return sources;
    };
    context.registrations = registered;
  }
  for (const ingest::SourceSpec& spec : options_.agent.sources) {
    bool seen = false;
    for (const auto& [model, unused] : context.configured_models) seen |= model == spec.model;
    if (!seen) context.configured_models.emplace_back(spec.model, spec.block_size);
  }
  if (!options_.embedded) {
    stream_state_.store(0);
    stream_created_ns_.store(0);
    context.log_ready = [this](std::string* reason) { return StreamReady(reason); };
  }
  if (!options_.epp.listen.empty()) {
    // The endpoint picker (--epp): the same index and readiness as the API.
    epp::EppOptions epp_options = options_.epp;
    epp_options.tokens.tokenizers = tokenizers_.get();
    epp_options.speculative = speculative_;
    std::vector<epp::Endpoint> from_sources = epp::EndpointsFromSources(options_.agent.sources);
    epp_options.static_endpoints.insert(epp_options.static_endpoints.end(), from_sources.begin(),
                                        from_sources.end());
    if (!options_.embedded) epp_options.announced = AnnouncedEndpoints(apply_.get());
    epp_ = std::make_unique<epp::EppServer>(std::move(epp_options), index_.get(),
                                            [this] { return Ready(); });
    context.extra_collectables.push_back(epp_->collectable());
    // /v1/match shows predict on route's entries apart ("speculative").
    context.speculative.any = [cache = speculative_] {
      return cache->enabled() && cache->size() > 0;
    };
    context.speculative.prefixes = [cache = speculative_](
                                       std::string_view model, std::span<const uint64_t> seq_hashes,
                                       std::vector<query::SpeculativeRow>* rows) {
      thread_local std::vector<std::pair<SourceKey, uint32_t>> held;
      cache->Prefixes(model, seq_hashes, epp::SpeculativeCache::Clock::now(), &held);
      for (auto& [source, blocks] : held) rows->push_back({std::move(source), blocks});
    };
  }
  if (sglang_aliases_) {
    sglang_alias_metrics_ = SglangAliasMetrics(sglang_aliases_);
    context.extra_collectables.push_back(sglang_alias_metrics_.get());
  }
  query::ApiOptions api_options;
  api_options.metrics_auth = options_.metrics_auth;
  api_options.ready_max_lag = options_.ready_max_lag;
  api_ = std::make_unique<query::RouterApi>(api_options, std::move(context));
  if (!options_.sglang_listen.empty()) {
    if (options_.sglang_ingest) {
      // ApplyExternalKvBatch into the in-process log, for the model the
      // SGLang service answers for.
      SglangBridgeOptions bridge;
      bridge.node = options_.agent.node + "/sglang-bridge";
      bridge.model = [api = api_.get(), model = options_.sglang_model](
                         std::string* why) -> std::optional<std::pair<std::string, uint32_t>> {
        const query::ApiContext& context = api->context();
        std::vector<std::string> models = context.index->Models();
        for (const auto& [name, unused] : context.configured_models) models.push_back(name);
        std::sort(models.begin(), models.end());
        models.erase(std::unique(models.begin(), models.end()), models.end());
        std::string name = model;
        if (name.empty() && models.size() == 1) name = models.front();
        if (name.empty()) {
          *why =
              "ApplyExternalKvBatch names no model: start the router with --sglang-model "
              "MODEL (or with one model known)";
          return std::nullopt;
        }
        std::optional<uint32_t> block_size = context.index->BlockSize(name);
        for (const auto& [configured, size] : context.configured_models) {
          if (!block_size && configured == name) block_size = size;
        }
        if (!block_size) {
          *why = strings::Cat("the block size of '", name,
                              "' is not known yet (no event, no --source of it)");
          return std::nullopt;
        }
        return std::pair<std::string, uint32_t>(name, *block_size);
      };
      // Not a --source worker or a registered instance (registered_ outlives
      // the bridge: reset after it).
      bridge.reserved = [registered = registered_.get(),
                         sources = options_.agent.sources](const std::string& worker) {
        if (registered != nullptr) return registered->Follows(worker);
        return std::any_of(sources.begin(), sources.end(),
                           [&](const ingest::SourceSpec& s) { return s.worker == worker; });
      };
      sglang_bridge_ = std::make_unique<SglangBridgeIngest>(std::move(bridge), sink_.get());
      // The reverse: no registration named like a worker the bridge feeds.
      if (registered_) {
        registered_->SetBridgeWorkers([bridge = sglang_bridge_.get()](const std::string& worker) {
          return bridge->InUse(worker);
        });
      }
    }
    // SGLang's KV indexer (--sglang-indexer): the same lookup as the API.
    sglang_ = std::make_unique<SglangService>(
        api_.get(), options_.sglang_listen, options_.sglang_model, sglang_aliases_,
        epp::EndpointsFromSources(options_.agent.sources),
        options_.embedded ? nullptr : AnnouncedEndpoints(apply_.get()), sglang_bridge_.get());
  }

  // The picker listens before /readyz can answer 200.
  if (epp_ || sglang_) {
    Status status = epp_ ? epp_->Start() : absl::OkStatus();
    if (status.ok() && epp_) status = StartLoadSignals();
    if (status.ok() && sglang_) status = sglang_->Start();
    if (!status.ok()) {
      StopLoadSignals();
      if (sglang_) sglang_->Stop();
      if (epp_) epp_->Stop();
      if (registered_) registered_->Stop();
      if (ingest_) ingest_->Stop();
      if (liveness_) liveness_->Stop();
      checkpointer_->Stop();
      apply_->Stop();
      return status;
    }
  }
  server_ = std::make_unique<http::Server>(options_.HttpOptions());
  api_->Register(*server_);
  if (Status status = server_->Start(); !status.ok()) {
    StopLoadSignals();
    if (sglang_) sglang_->Stop();
    if (epp_) epp_->Stop();
    if (registered_) registered_->Stop();
    if (ingest_) ingest_->Stop();
    if (liveness_) liveness_->Stop();
    checkpointer_->Stop();
    apply_->Stop();
    return status;
  }
  if (!options_.embedded) {
    stream_stop_.Reset();
    stream_watch_ = std::thread([this] { WatchStream(); });
  }
  heap_trimmer_ = std::make_unique<metrics::HeapTrimmer>(metrics::HeapTrimmerOptions{},
                                                         registry_.get(), "kvindex_router");
  heap_trimmer_->Start();
  running_ = true;
  return absl::OkStatus();
}

Status Router::StartLoadSignals() {
  if (options_.embedded) {
    if (options_.load_interval.count() <= 0) return absl::OkStatus();
    epp::LoadTable* table = epp_->load();
    epp::LoadScraperOptions scrape;
    scrape.interval = options_.load_interval;
    load_scraper_ = std::make_unique<epp::LoadScraper>(
        epp::ScrapeTargets(options_.agent.sources), scrape,
        [table](const std::vector<codec::SourceLoad>& samples) {
          const auto now = epp::LoadTable::Clock::now();
          for (const codec::SourceLoad& s : samples) table->Update(s.source, s.load, now);
        },
        registry_.get(), "kvindex_router");
    load_scraper_->Start();
    return absl::OkStatus();
  }
  KVINDEX_ASSIGN_OR_RETURN(load_feed_,
                           LoadFeed::Subscribe(connection_->raw(), options_.stream.subjects.prefix,
                                               &apply_->agents(), epp_.get()));
  return absl::OkStatus();
}

void Router::StopLoadSignals() {
  if (load_scraper_) load_scraper_->Stop();
  load_scraper_.reset();
  load_feed_.reset();
}

void Router::Bootstrap() {
  auto logger = log::Get("router");
  const auto start = std::chrono::steady_clock::now();
  StatusOr<http::Url> url = http::ParseUrl(options_.bootstrap_from);
  if (!url.ok()) {
    logger->error("--bootstrap-from: {}", url.status().ToString());
    return;
  }
  http::ClientRequest request;
  request.url = *url;
  request.path = "/v1/checkpoint";
  request.timeout = options_.bootstrap_timeout;
  // A peer that streams without Content-Length, or more than the bound, is
  // refused before its checkpoint is buffered.
  request.max_response_bytes = options_.bootstrap_max_bytes;
  request.require_content_length = true;
  request.cancel = options_.cancel;
  request.ca_file = options_.bootstrap_ca;
  if (!options_.auth_token.empty() && url->tls) {
    request.headers.emplace_back("Authorization", "Bearer " + options_.auth_token);
  } else if (!options_.auth_token.empty()) {
    // The token is never sent in clear text: a peer that requires it
    // answers 401 and this router starts from the log.
    logger->error(
        "--bootstrap-from {}: not sending the API token over plain HTTP (use an https:// URL, "
        "with --bootstrap-ca); a peer that requires it refuses the bootstrap (401) and this "
        "router starts from the log",
        options_.bootstrap_from);
  }
  StatusOr<http::ClientResponse> reply = http::Fetch(request);
  Status status = reply.status();
  if (reply.ok() && reply->status != 200) {
    status = absl::UnavailableError(strings::Cat("answered ", reply->status, ": ", reply->body));
  }
  StatusOr<storage::CheckpointInfo> info =
      status.ok() ? checkpointer_->Import(reply->body) : StatusOr<storage::CheckpointInfo>(status);
  if (absl::IsCancelled(info.status())) {
    logger->warn("bootstrap from {} cancelled", options_.bootstrap_from);
    return;
  }
  if (!info.ok()) {
    // Not fatal: the log (or a resync) rebuilds the state, only slower.
    logger->error("no bootstrap from {}: {}; starting from the log", options_.bootstrap_from,
                  info.status().ToString());
    return;
  }
  uint64_t entries = 0;
  for (uint64_t n : info->entries) entries += n;
  logger->info("bootstrapped from {}: checkpoint of position {} ({} entries, {} bytes) in {:.3f} s",
               options_.bootstrap_from, info->applied_seq, entries, info->bytes,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void Router::WatchStream() {
  auto logger = log::Get("router");
  do {
    StatusOr<storage::StreamIdentity> identity =
        StreamIdentityOf(connection_->jetstream(), options_.stream.name);
    if (absl::IsNotFound(identity.status())) {
      if (stream_state_.exchange(1) != 1) {
        logger->error("stream '{}' does not exist: not ready until it does", options_.stream.name);
      }
    } else if (identity.ok()) {
      int64_t first = 0;
      stream_created_ns_.compare_exchange_strong(first, identity->created_ns);
      stream_seen_created_ns_.store(identity->created_ns);
      const int state = identity->created_ns == stream_created_ns_.load() ? 0 : 2;
      if (stream_state_.exchange(state) != state && state == 2) {
        logger->error(
            "stream '{}' was recreated (created at {} ns, this router applied the one created "
            "at {} ns): not ready; restart it to rebuild from the new stream",
            options_.stream.name, identity->created_ns, stream_created_ns_.load());
      }
    }
  } while (!stream_stop_.WaitFor(std::chrono::seconds(1)));
}

bool Router::StreamReady(std::string* reason) const {
  if (connection_ != nullptr && connection_->auth_failing()) {
    if (reason != nullptr) *reason = "NATS refuses the credentials (retrying)";
    return false;
  }
  const int state = stream_state_.load();
  if (state == 0) return true;
  if (reason != nullptr) {
    *reason = state == 1 ? strings::Cat("stream '", options_.stream.name, "' does not exist")
                         : strings::Cat("stream '", options_.stream.name,
                                        "' was recreated since this router started (created at ",
                                        stream_seen_created_ns_.load(), " ns): restart it");
  }
  return false;
}

void Router::Stop() {
  if (!running_) return;
  heap_trimmer_.reset();  // stops its thread
  StopLoadSignals();
  if (sglang_) sglang_->Stop();
  if (epp_) epp_->Stop();
  server_->Stop();
  if (stream_watch_.joinable()) {
    stream_stop_.Raise();
    stream_watch_.join();
  }
  if (liveness_) liveness_->Stop();
  // Registered engines stop first (the file keeps them for the next start).
  if (registered_) registered_->Stop();
  checkpointer_->Stop();
  if (ingest_) {
    // The last checkpoint with the sources parked and the log applied, so a
    // restart continues every source where it stopped; they stay parked
    // until they stop.
    ingest_->Hold();
    checkpointer_->WriteNow().IgnoreError();  // failures are logged and counted
    ingest_->Stop();
    ingest_->Release();
    apply_->Stop();
  } else {
    apply_->Stop();
    // The state at the last applied position, so a clean restart replays nothing.
    checkpointer_->WriteNow().IgnoreError();  // failures are logged and counted
  }
  if (sink_) sink_->Close();
  running_ = false;
}

}  // namespace kvindex::router
