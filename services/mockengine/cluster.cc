#include "services/mockengine/cluster.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "services/mockengine/ground_truth.h"
#include "services/mockengine/prompt_tokens.h"
#include "shared/base/percentile.h"
#include "shared/hashing/canonical_hash.h"
#include "shared/query/json_writer.h"
#include "shared/query/match_request.h"
#include "shared/query/router_api.h"

namespace kvindex::mockengine {
namespace {

// Batches a slow subscriber loses in a burst: PUB skips them above its
// high-water mark (the replay socket still has them).
constexpr uint32_t kSlowBurst = 8;
// TensorRT-LLM seqs start at time_ns(); the simulation's "now" is fixed so
// runs repeat, and a restart moves it on by a second.
constexpr uint64_t kTrtllmFirstSeq = 1'760'000'000'000'000'000ull;
constexpr uint64_t kTrtllmRestartJump = 1'000'000'000ull;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Cluster::Cluster(ClusterOptions options, std::vector<trace::TraceRequest> requests,
                 std::string trace)
    : options_(std::move(options)),
      requests_(std::move(requests)),
      trace_(std::move(trace)),
      logger_(log::Get("mockengine")),
      policy_(options_.policy, options_.seed, options_.models.size(), options_.kv_load_weight),
      load_(options_.load, 0),
      faults_(options_.faults, options_.seed, requests_.size()) {
  by_model_.resize(options_.models.size());
  for (size_t i = 0; i < options_.workers.size(); ++i) {
    const WorkerConfig& w = options_.workers[i];
    const size_t model =
        static_cast<size_t>(std::find(options_.models.begin(), options_.models.end(), w.model) -
                            options_.models.begin());
    for (uint32_t rank = 0; rank < w.dp_ranks; ++rank) {
      Source s;
      s.worker = i;
      s.model = model;
      s.key = {options_.worker_prefix + std::to_string(i), rank};
      s.config = &w;
      s.sglang = w.wire == "sglang";
      s.trtllm = w.wire == "trtllm";
      if (w.wire == "vllm-array") s.encoding.form = wire::EventForm::kArray;
      if (s.sglang) s.encoding.hashes = wire::HashEncoding::kSigned;
      // Media per engine: SGLang names its tiers CPU_PINNED and DISK; vLLM
      // and TensorRT-LLM (vLLM-shaped) CPU and STORAGE.
      s.engine = std::make_unique<SimulatedEngine>(
          EngineOptions{.block_size = options_.block_size,
                        .device_capacity_blocks = w.device,
                        .host_capacity_blocks = w.host,
                        .disk_capacity_blocks = w.disk,
                        .host_medium = s.sglang ? "CPU_PINNED" : "CPU",
                        .disk_medium = s.sglang ? "DISK" : "STORAGE",
                        .self_describing_offload = w.cpu_events_tokens,
                        .hash_seed = 0xC0FFEEull * (sources_.size() + 1)});
      s.has_replay = options_.replay_base_port > 0;
      by_model_[model].push_back(sources_.size());
      sources_.push_back(std::move(s));
    }
  }
  std::vector<uint32_t> max_running;
  for (const Source& s : sources_) max_running.push_back(s.config->max_running);
  load_ = LoadModel(options_.load, sources_.size(), std::move(max_running));
  arrivals_us_ = ArrivalTimesUs(requests_, options_.rate);
  requests_per_worker_.assign(options_.workers.size(), 0);
  engine_load_.assign(options_.workers.size(), EngineLoad{});
  for (size_t i = 0; i < options_.workers.size(); ++i) {
    if (options_.engine_http_base_port > 0) worker_of_address_[EngineAddress(options_, i)] = i;
  }
  if (!options_.router_url.empty()) {
    if (auto url = http::ParseUrl(options_.router_url); url.ok()) router_ = *url;
  }
}

std::string Cluster::TopicOf(const Source& source) const {
  if (!source.sglang) return options_.topic;
  // SGLang snapshot mode: the epoch rides in the topic; a restart starts a new one.
  std::string topic = options_.topic;
  topic.push_back('\0');
  return topic + "sgl-kv-epoch=" + std::to_string(source.epoch);
}

Cluster::~Cluster() {
  for (auto& server : engine_http_) server->Stop();
}

Status Cluster::Bind(zmq::context_t& context) {
  for (size_t i = 0; i < options_.workers.size() && options_.engine_http_base_port > 0; ++i) {
    EngineHttpHooks hooks;
    hooks.on_request = [this, i](uint64_t r) {
      if (routing_.load() != static_cast<int64_t>(r)) return false;
      MutexLock lock(&mutex_);
      received_[r] = i;
      return true;
    };
    hooks.load = [this, i] {
      MutexLock lock(&mutex_);
      EngineLoad load = engine_load_[i];
      load.served = requests_per_worker_[i];
      return load;
    };
    engine_http_.push_back(
        std::make_unique<EngineHttp>(EngineAddress(options_, i), options_.workers[i].model, hooks));
    KVINDEX_RETURN_IF_ERROR(engine_http_.back()->Start());
  }
  if (options_.policy == Policy::kEpp) epp_ = std::make_unique<EppGateway>(options_.epp_address);
  for (size_t k = 0; k < sources_.size(); ++k) {
    Source& s = sources_[k];
    EndpointOptions e;
    e.pub_endpoint = "tcp://" + options_.host + ":" + std::to_string(options_.pub_base_port + k);
    if (s.has_replay) {
      e.replay_endpoint =
          "tcp://" + options_.host + ":" + std::to_string(options_.replay_base_port + k);
    }
    e.topic = TopicOf(s);
    e.layout = s.sglang ? ReplayLayout::kWithoutTopic : ReplayLayout::kWithTopic;
    s.endpoint = std::make_unique<EngineEndpoint>(context, e);
    if (s.trtllm) s.endpoint->set_next_seq(kTrtllmFirstSeq);
    KVINDEX_RETURN_IF_ERROR(s.endpoint->Bind());
  }
  return absl::OkStatus();
}

void Cluster::ServeReplayFor(const std::atomic<bool>& stop, std::chrono::milliseconds duration) {
  const auto deadline = std::chrono::steady_clock::now() + duration;
  std::vector<zmq::pollitem_t> items;
  for (Source& s : sources_) {
    if (s.endpoint && s.endpoint->replay_socket()) {
      items.push_back({s.endpoint->replay_socket()->handle(), 0, ZMQ_POLLIN, 0});
    }
  }
  // Replay is answered at least once per call: behind the --rate schedule
  // (a negative wait) the agent's replay requests must not starve.
  for (Source& s : sources_) {
    if (s.endpoint) s.endpoint->ServeReplay();
  }
  while (!stop.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return;
    bool pending = false;
    for (const Source& s : sources_) pending |= s.endpoint && s.endpoint->replay_pending();
    // Answers in progress go on at once, a chunk per requester per round.
    const auto wait =
        pending ? std::chrono::milliseconds(0)
                : std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now),
                           std::chrono::milliseconds(100));
    if (items.empty()) {
      std::this_thread::sleep_for(wait);
    } else {
      try {
        zmq::poll(items.data(), items.size(), wait);
      } catch (const zmq::error_t&) {
        // EINTR from SIGINT/SIGTERM: the loop condition sees `stop`.
      }
    }
    for (Source& s : sources_) {
      if (s.endpoint) s.endpoint->ServeReplay();
    }
  }
}

void Cluster::Run(const std::atomic<bool>& stop, std::chrono::milliseconds start_delay) {
  {
    MutexLock lock(&mutex_);  // /v1/progress reads it
    started_ = std::chrono::steady_clock::now();
  }
  const bool paced = !options_.dry_run && options_.rate > 0;
  if (!options_.dry_run) ServeReplayFor(stop, start_delay);
  const auto interval = paced ? std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::duration<double>(1.0 / options_.rate))
                              : std::chrono::nanoseconds(0);
  auto next = std::chrono::steady_clock::now();
  // An agent that started with us replays every source at start-up.
  for (Source& s : sources_) s.replayed_at = next;
  for (size_t r = 0; r < requests_.size() && !stop.load(); ++r) {
    ServeRequest(r);
    if (options_.dry_run) continue;
    next += interval;
    if (paced) {
      ServeReplayFor(stop, std::chrono::duration_cast<std::chrono::milliseconds>(
                               next - std::chrono::steady_clock::now()));
    } else {
      for (Source& s : sources_) s.endpoint->ServeReplay();
    }
  }
  MutexLock lock(&mutex_);
  PublishFences();
  done_.store(true);
  logger_->info("trace done: {} requests, {} batches published", requests_done_,
                batches_published_);
}

bool Cluster::AskRouter(size_t model, std::span<const uint32_t> tokens, index::MatchResult* out) {
  std::string body = "{\"model\":\"";
  AppendJsonEscaped(options_.models[model], &body);
  body += "\",\"tokens\":[";
  char number[16];
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i) body.push_back(',');
    body.append(number, std::to_chars(number, number + sizeof(number), tokens[i]).ptr);
  }
  body += "]}";
  const auto t0 = std::chrono::steady_clock::now();
  http::ClientRequest request;
  request.method = "POST";
  request.url = router_;
  request.path = "/v1/match";
  request.body = std::move(body);
  request.timeout = std::chrono::milliseconds(2000);
  auto reply = http::Fetch(request);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (reply.ok() && reply->status == 404) {
    // A model none of whose engines has announced anything to this router
    // yet (a --nats router learns models from the log): nothing is cached.
    out->workers.clear();
    MutexLock lock(&mutex_);
    ++match_unknown_model_;
    match_latency_us_.push_back(us);
    return true;
  }
  if (!reply.ok() || reply->status != 200) {
    logger_->warn("match failed: {}", reply.ok() ? reply->body : reply.status().ToString());
    return false;
  }
  const auto json = nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.contains("workers") || !json["workers"].is_array()) {
    logger_->warn("match answer without workers: {}", reply->body.substr(0, 200));
    return false;
  }
  out->workers.clear();
  for (const auto& row : json["workers"]) {
    index::WorkerMatch m;
    m.source.worker = row.value("worker", std::string());
    m.source.dp_rank = row.value("dp_rank", 0u);
    m.longest = row.value("longest", 0u);
    m.device = row.value("device", 0u);
    m.host = row.value("host", 0u);
    m.disk = row.value("disk", 0u);
    m.external = row.value("external", 0u);
    out->workers.push_back(std::move(m));
  }
  MutexLock lock(&mutex_);
  match_latency_us_.push_back(us);
  return true;
}

std::optional<size_t> Cluster::RouteThroughEpp(size_t r, size_t model,
                                               std::span<const uint32_t> tokens,
                                               std::optional<double>* pick_us) {
  routing_.store(static_cast<int64_t>(r));
  StatusOr<EppRoute> route =
      epp_->Route(options_.models[model], tokens, requests_[r].output_length, r);
  routing_.store(-1);
  MutexLock lock(&mutex_);
  std::optional<size_t> taken;
  if (auto it = received_.find(r); it != received_.end()) {
    taken = it->second;
    received_.erase(it);
  }
  if (!route.ok()) {
    ++match_errors_;
    if (absl::IsUnavailable(route.status()) || absl::IsResourceExhausted(route.status()) ||
        absl::IsInvalidArgument(route.status())) {
      ++epp_immediate_;
    }
    logger_->warn("request {} through the endpoint picker: {}", r, route.status().ToString());
    return taken;
  }
  match_latency_us_.push_back(route->pick_us);
  *pick_us = route->pick_us;
  if (route->served != route->picked[0]) ++epp_fallbacks_;
  auto served = worker_of_address_.find(route->served);
  if (!taken || served == worker_of_address_.end() || served->second != *taken) {
    ++epp_misrouted_;
    logger_->warn("request {}: served by {} but taken by worker {}", r, route->served,
                  taken ? static_cast<int64_t>(*taken) : -1);
  }
  return taken;
}

void Cluster::UpdateEngineLoad(size_t model, double now_us) {
  for (size_t k : by_model_[model]) engine_load_[sources_[k].worker] = EngineLoad{};
  for (size_t k : by_model_[model]) {
    EngineLoad& load = engine_load_[sources_[k].worker];
    const SourceLoad now = load_.Load(k, now_us);
    load.running += now.running;
    load.waiting += now.waiting;
    const double capacity = static_cast<double>(sources_[k].config->device);
    load.kv_use =
        std::max(load.kv_use,
                 std::min(1.0, capacity > 0 ? static_cast<double>(now.blocks) / capacity : 0.0));
  }
}

void Cluster::ServeRequest(size_t r) {
  const size_t model = r % options_.models.size();
  const std::vector<uint32_t> tokens = PromptTokens(requests_[r]);
  const double arrival = arrivals_us_[r];
  const std::vector<size_t>& members = by_model_[model];
  candidates_.clear();
  for (size_t k : members) candidates_.push_back({sources_[k].key, load_.InFlight(k, arrival)});
  index::MatchResult match;
  const index::MatchResult* answer = nullptr;
  if (options_.policy == Policy::kKvAware) {
    // Asked without the lock: truth readers are not held up by the router.
    if (AskRouter(model, tokens, &match)) {
      answer = &match;
    } else {
      MutexLock lock(&mutex_);
      ++match_errors_;
    }
  }
  size_t chosen = 0;
  std::optional<double> exchange_us;  // the router exchange: match or pick
  if (options_.policy == Policy::kEpp) {
    // The picker chose an engine (a worker); its ranks share the endpoint
    // and the least loaded of them takes the request. No engine took it:
    // least-loaded over all.
    const std::optional<size_t> worker = RouteThroughEpp(r, model, tokens, &exchange_us);
    routed_members_.clear();
    routed_candidates_.clear();
    for (size_t i = 0; i < members.size(); ++i) {
      if (worker && sources_[members[i]].worker != *worker) continue;
      routed_members_.push_back(members[i]);
      routed_candidates_.push_back(candidates_[i]);
    }
    if (routed_members_.empty()) {  // an engine of another model took it
      routed_members_ = members;
      routed_candidates_ = candidates_;
    }
    chosen = routed_members_[policy_.Place(model, routed_candidates_, nullptr)];
  } else {
    chosen = members[policy_.Place(model, candidates_, answer,
                                   static_cast<uint32_t>(tokens.size() / options_.block_size))];
  }
  const uint32_t in_flight =
      candidates_[static_cast<size_t>(std::find(members.begin(), members.end(), chosen) -
                                      members.begin())]
          .in_flight;

  MutexLock lock(&mutex_);
  if (answer != nullptr) exchange_us = match_latency_us_.back();
  Source& source = sources_[chosen];
  faults_.OnRequest(r);
  if (faults_.Fire(FaultKind::kRestart)) Restart(source, r);
  events_.clear();
  const PrefixHit hit = source.engine->ServePrompt(tokens, &events_);
  const uint64_t saved = uint64_t{hit.total()} * options_.block_size;
  const uint32_t waiting = load_.Load(chosen, arrival).waiting;  // ahead of it
  double wait_us = 0;
  load_.Start(chosen, arrival, tokens.size() - std::min<uint64_t>(saved, tokens.size()),
              requests_[r].output_length, source.config->speed, hit.prompt_blocks, &wait_us);
  UpdateEngineLoad(model, arrival);
  if (!events_.empty()) PublishBatch(source, r);

  prompt_blocks_ += hit.prompt_blocks;
  hit_blocks_[0] += hit.device;
  hit_blocks_[1] += hit.host;
  hit_blocks_[2] += hit.disk;
  saved_tokens_ += saved;
  prefill_tokens_ += tokens.size() - std::min<uint64_t>(saved, tokens.size());
  ++requests_per_worker_[source.worker];
  in_flight_sum_ += in_flight;
  // The queue right after this arrival: the requests ahead, and this one if it waits too.
  max_waiting_ = std::max(max_waiting_, waiting + (wait_us > 0 ? 1u : 0u));
  wait_us_.push_back(wait_us);
  ++requests_done_;
  if (options_.record_requests) {
    query::JsonWriter w(&requests_jsonl_);
    w.BeginObject();
    w.Field("request", r);
    w.Field("model", options_.models[model]);
    w.Field("worker", source.key.worker);
    w.Field("dp_rank", source.key.dp_rank);
    w.Field("prompt_blocks", hit.prompt_blocks);
    w.Field("device", hit.device);
    w.Field("host", hit.host);
    w.Field("disk", hit.disk);
    w.Field("in_flight", in_flight);
    w.Field("waiting", waiting);
    w.Key("wait_us");
    w.Double(wait_us);
    w.Key("match_us");
    if (exchange_us) {
      w.Double(*exchange_us);
    } else {
      w.Null();
    }
    w.EndObject();
    requests_jsonl_.push_back('\n');
  }
}

std::string Cluster::RequestsJsonl() const {
  MutexLock lock(&mutex_);
  return requests_jsonl_;
}

bool Cluster::LossAllowed(const Source& source) const {
  if (options_.dry_run) return true;
  if (source.loss_outstanding) return false;
  return !source.replayed_at ||
         std::chrono::steady_clock::now() - *source.replayed_at >= options_.fault_min_interval;
}

void Cluster::Send(Source& source, std::span<const uint8_t> payload, bool live, bool keep) {
  ++batches_published_;
  if (live) {
    source.needs_fence = false;
    if (source.loss_outstanding) {  // this batch shows the agent the loss: it replays now
      source.loss_outstanding = false;
      source.replayed_at = std::chrono::steady_clock::now();
    }
  } else {
    source.loss_outstanding = true;
  }
  if (!source.endpoint) return;  // dry run
  if (auto status = source.endpoint->Publish(payload, live, keep); !status.ok()) {
    logger_->error("{}/{}: {}", source.key.worker, source.key.dp_rank, status.ToString());
  }
}

void Cluster::PublishBatch(Source& source, size_t r) {
  const std::string label = source.key.worker + "/" + std::to_string(source.key.dp_rank);
  if (faults_.Fire(FaultKind::kMalformed)) {
    // 0xc1 is never used in msgpack: the payload cannot decode, the agent
    // clears the source; the engine still holds its blocks.
    static constexpr uint8_t kGarbage[] = {0xc1, 0xc1, 0xc1, 0xc1};
    Send(source, kGarbage, true, true);
    source.view.Clear();
    source.cleared_by_fault = true;
    logger_->info("fault malformed: request {} on {}", r, label);
  }
  payload_.clear();
  if (source.endpoint) {  // a dry run sends nothing: no need to encode
    wire::EncodeBatch(WallSeconds(), events_, source.key.dp_rank, source.encoding, &payload_);
  }
  bool live = true, keep = true;
  const bool first_after_restart = source.restarted;
  if (first_after_restart) {
    // The first batch after a restart goes out live (a fresh PUB socket, no
    // burst): the agent can only learn of the restart from a batch it
    // receives, and replay cannot serve what came before it in the new seq
    // space. Loss faults wait for the next batch.
    source.restarted = false;
  } else if (!LossAllowed(source)) {
    // Due loss faults wait for a later batch of this or another source.
  } else if (faults_.Fire(FaultKind::kDrop)) {
    live = false;
    logger_->info("fault drop: request {} on {} ({})", r, label,
                  source.has_replay ? "replay serves it" : "no replay socket: a clear");
  } else if (faults_.Fire(FaultKind::kGap)) {
    live = keep = false;
    logger_->info("fault gap: request {} on {} (not replayable)", r, label);
  }
  if (!first_after_restart && live && keep && LossAllowed(source) &&
      faults_.Fire(FaultKind::kSlow)) {
    source.slow_left = kSlowBurst;
    logger_->info("fault slow: request {} on {}: the next {} batches overflow PUB", r, label,
                  kSlowBurst);
  }
  if (source.slow_left > 0 && keep) {
    --source.slow_left;
    live = false;
  }
  Send(source, payload_, live, keep);
  events_published_ += events_.size();
  if (!live) source.needs_fence = true;
  if (!keep || (!live && !source.has_replay)) {
    // Unrecoverable: the agent clears the source when it sees the gap.
    source.view.Clear();
    source.cleared_by_fault = true;
  } else {
    source.view.Apply(events_);
  }
}

void Cluster::Restart(Source& source, size_t r) {
  source.engine->Reset();
  source.view.Clear();
  source.cleared_by_fault = true;
  source.needs_fence = true;  // the agent learns of it from the next batch
  source.restarted = true;
  source.slow_left = 0;
  // TensorRT-LLM's seq jump makes the agent try a replay (which fails).
  if (source.trtllm) source.loss_outstanding = true;
  ++source.epoch;
  if (source.endpoint) {
    // vLLM/SGLang restart at seq 0 (SGLang also with a new epoch);
    // TensorRT-LLM at a later time_ns(), which the agent sees as a gap that
    // the emptied replay buffer cannot cover.
    source.endpoint->Restart(source.trtllm ? source.endpoint->next_seq() + kTrtllmRestartJump : 0);
    source.endpoint->set_topic(TopicOf(source));
  }
  logger_->info("fault restart: request {} on {}/{}", r, source.key.worker, source.key.dp_rank);
}

void Cluster::PublishFences() {
  // A fault is noticed only at the source's next batch. When the run ends
  // right after one, an empty batch (as TensorRT-LLM's heartbeat) lets the
  // agent see it, so the final state is the one semantics.md allows.
  std::vector<uint8_t> empty;
  for (Source& s : sources_) {
    if (!s.needs_fence) continue;
    empty.clear();
    wire::EncodeBatch(s.endpoint ? WallSeconds() : 0.0, {}, s.key.dp_rank, s.encoding, &empty);
    Send(s, empty, true, true);
    ++fences_;
  }
  if (fences_ > 0) logger_->info("{} end-of-run fence batches after faults", fences_);
}

std::vector<TruthSource> Cluster::TruthSources() const {
  std::vector<TruthSource> truth;
  truth.reserve(sources_.size());
  for (const Source& s : sources_) {
    truth.push_back({options_.models[s.model], s.key, options_.block_size, s.engine.get(), &s.view,
                     s.cleared_by_fault});
  }
  return truth;
}

std::string Cluster::TruthJson() const {
  MutexLock lock(&mutex_);
  std::string out;
  WriteTruthJson(TruthSources(), requests_done_, requests_.size(), &out);
  return out;
}

int Cluster::MatchJson(std::string_view body, bool index_view, std::string* out) const {
  thread_local query::MatchRequest request;
  if (Status s = query::ParseMatchRequest(body, query::RequestDialect::kMatch, &request); !s.ok()) {
    *out = "{\"error\":\"";
    AppendJsonEscaped(std::string(s.message()), out);
    *out += "\"}";
    return 400;
  }
  const auto model = std::find(options_.models.begin(), options_.models.end(), request.model);
  if (model == options_.models.end()) {
    *out = "{\"error\":\"unknown model '";
    AppendJsonEscaped(request.model, out);
    *out += "'\"}";
    return 404;
  }
  std::vector<uint64_t> local, seq;
  if (request.has_tokens) {
    hashing::ComputeLocalHashes(request.tokens, options_.block_size,
                                hashing::LocalHashSeed(request.lora_name, request.cache_salt),
                                &local);
  } else {
    local = request.local_hashes;
  }
  if (request.max_blocks > 0 && local.size() > request.max_blocks) local.resize(request.max_blocks);
  hashing::ComputeSequenceHashes(local, std::nullopt, &seq);

  MutexLock lock(&mutex_);
  index::MatchResult result = MatchTruth(TruthSources(), request.model, seq, index_view);
  result.applied_seq = requests_done_;  // the truth's "position": requests served
  query::WriteMatchResponse(request.model, result, out);
  return 200;
}

void Cluster::WriteReport(std::string* out) const {
  query::JsonWriter w(out);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  w.BeginObject();
  w.Field("policy", PolicyName(options_.policy));
  w.Field("trace", trace_);
  w.Field("workers", options_.workers.size());
  w.Key("models");
  w.BeginArray();
  for (const std::string& m : options_.models) w.String(m);
  w.EndArray();
  w.Field("requests", requests_done_);
  w.Field("prompt_blocks", prompt_blocks_);
  const uint64_t hits = hit_blocks_[0] + hit_blocks_[1] + hit_blocks_[2];
  static constexpr std::string_view kTiers[] = {"device", "host", "disk"};
  w.Key("hit_blocks");
  w.BeginObject();
  for (int t = 0; t < 3; ++t) w.Field(kTiers[t], hit_blocks_[t]);
  w.EndObject();
  w.Key("hit_rate");
  w.Double(ratio(static_cast<double>(hits), static_cast<double>(prompt_blocks_)));
  w.Key("hit_rate_by_tier");
  w.BeginObject();
  for (int t = 0; t < 3; ++t) {
    w.Key(kTiers[t]);
    w.Double(ratio(static_cast<double>(hit_blocks_[t]), static_cast<double>(prompt_blocks_)));
  }
  w.EndObject();
  w.Field("prefill_tokens", prefill_tokens_);
  w.Field("prefill_tokens_saved", saved_tokens_);
  double mean = 0, max = 0, var = 0;
  for (uint64_t n : requests_per_worker_) {
    mean += static_cast<double>(n);
    max = std::max(max, static_cast<double>(n));
  }
  mean /= static_cast<double>(requests_per_worker_.size());
  for (uint64_t n : requests_per_worker_) var += std::pow(static_cast<double>(n) - mean, 2);
  var /= static_cast<double>(requests_per_worker_.size());
  w.Key("load");
  w.BeginObject();
  w.Key("requests_per_worker");
  w.BeginArray();
  for (uint64_t n : requests_per_worker_) w.UInt(n);
  w.EndArray();
  w.Key("max_over_mean");
  w.Double(ratio(max, mean));
  w.Key("cv");
  w.Double(ratio(std::sqrt(var), mean));
  w.Key("mean_in_flight_at_arrival");
  w.Double(ratio(in_flight_sum_, static_cast<double>(requests_done_)));
  w.Field("max_waiting", max_waiting_);
  w.Key("wait_us");
  w.BeginObject();
  double wait_sum = 0;
  for (double us : wait_us_) wait_sum += us;
  w.Key("mean");
  w.Double(ratio(wait_sum, static_cast<double>(wait_us_.size())));
  w.Key("p99");
  w.Double(Percentile(wait_us_, 0.99));
  w.EndObject();
  w.EndObject();
  w.Key("match_latency_us");
  w.BeginObject();
  w.Field("count", match_latency_us_.size());
  w.Key("p50");
  w.Double(Percentile(match_latency_us_, 0.50));
  w.Key("p99");
  w.Double(Percentile(match_latency_us_, 0.99));
  w.EndObject();
  w.Field("match_errors", match_errors_);
  w.Field("match_unknown_model", match_unknown_model_);
  if (options_.policy == Policy::kEpp) {
    w.Key("epp");
    w.BeginObject();
    w.Field("picks", match_latency_us_.size());
    w.Field("immediate", epp_immediate_);
    w.Field("fallbacks", epp_fallbacks_);
    w.Field("misrouted", epp_misrouted_);
    w.EndObject();
  }
  w.Key("faults");
  w.BeginObject();
  for (int k = 0; k < kNumFaultKinds; ++k) {
    w.Field(FaultKindName(static_cast<FaultKind>(k)), faults_.injected(static_cast<FaultKind>(k)));
  }
  w.Field("fence_batches", fences_);
  w.EndObject();
  w.EndObject();
}

std::string Cluster::ReportJson() const {
  MutexLock lock(&mutex_);
  std::string out;
  WriteReport(&out);
  return out;
}

std::string Cluster::ProgressJson() const {
  MutexLock lock(&mutex_);
  std::string out;
  query::JsonWriter w(&out);
  w.BeginObject();
  w.Field("policy", PolicyName(options_.policy));
  w.Field("requests_done", requests_done_);
  w.Field("requests_total", requests_.size());
  w.Field("batches_published", batches_published_);
  w.Field("events_published", events_published_);
  w.Key("elapsed_s");
  w.Double(
      started_.time_since_epoch().count() == 0
          ? 0.0
          : std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  w.Key("report");
  WriteReport(&out);
  w.EndObject();
  return out;
}

}  // namespace kvindex::mockengine
