#include "shared/ingest/agent_pipeline.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "shared/base/mutex.h"
#include "shared/base/stop_signal.h"
#include "shared/base/strings.h"
#include "shared/ingest/agent_probe.h"
#include "shared/ingest/internal/disconnect_monitor.h"
#include "shared/ingest/internal/pause_gate.h"
#include "shared/ingest/internal/resume_plan.h"
#include "shared/ingest/internal/source_runner.h"
#include "shared/ingest/internal/zmq_capacity.h"
#include "shared/ingest/internal/zmq_util.h"
#include "shared/ingest/replay_client.h"
#include "shared/ingest/source_session.h"
#include "shared/log/log.h"

namespace kvindex::ingest {
namespace {

constexpr std::chrono::milliseconds kRetryMin{10};
constexpr std::chrono::milliseconds kRetryMax{1000};

uint64_t WallClockNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

Status AgentOptions::Validate() const {
  if (node.empty()) return absl::InvalidArgumentError("agent node id is empty (--node)");
  if (sources.empty()) return absl::InvalidArgumentError("no sources configured (--source)");
  if (replay_timeout.count() <= 0) {
    return absl::InvalidArgumentError("replay_timeout must be positive");
  }
  if (replay_cooldown.count() < 0) {
    return absl::InvalidArgumentError("replay_cooldown must not be negative");
  }
  if (heartbeat_lease_ms == 0) {
    return absl::InvalidArgumentError("heartbeat_lease_ms must be positive");
  }
  if (max_message_bytes != -1 && max_message_bytes < 1024) {
    return absl::InvalidArgumentError(strings::Cat(
        "max message bytes must be -1 (no limit) or >= 1024, got ", max_message_bytes));
  }
  if (heartbeat_interval.count() < 0) {
    return absl::InvalidArgumentError("heartbeat_interval must not be negative");
  }
  if (receive_hwm < 0) return absl::InvalidArgumentError("receive_hwm must not be negative");
  absl::flat_hash_map<std::string, uint32_t> block_sizes;
  absl::flat_hash_set<std::string> endpoints;
  for (const SourceSpec& spec : sources) {
    const std::string where = strings::Cat("source '", FormatSourceSpec(spec), "': ");
    if (spec.worker.empty()) return absl::InvalidArgumentError(where + "empty worker");
    if (spec.model.empty()) return absl::InvalidArgumentError(where + "empty model");
    if (spec.block_size == 0) return absl::InvalidArgumentError(where + "block_size is 0");
    if (spec.pub_endpoint.empty()) return absl::InvalidArgumentError(where + "empty pub");
    auto [it, inserted] = block_sizes.emplace(spec.model, spec.block_size);
    if (!inserted && it->second != spec.block_size) {
      return absl::InvalidArgumentError(strings::Cat(where, "model ", spec.model,
                                                     " already has block_size ", it->second,
                                                     " (a model has one block size)"));
    }
    if (!endpoints.insert(spec.pub_endpoint).second) {
      return absl::InvalidArgumentError(
          strings::Cat(where, "pub endpoint ", spec.pub_endpoint, " used by two sources"));
    }
  }
  return absl::OkStatus();
}

struct AgentPipeline::Impl final : public BatchSink {
  using Source = internal::SourceRunner;

  Impl(AgentOptions opts, PlacementPublisher* pub, prometheus::Registry* registry)
      : options(std::move(opts)), publisher(pub), probe(registry) {
    absl::flat_hash_map<std::string, int> label_count;
    for (const SourceSpec& spec : options.sources) ++label_count[SourceLabel(spec)];
    for (const SourceSpec& spec : options.sources) {
      auto source = std::make_unique<Source>();
      source->spec = spec;
      source->spec.max_blocks_per_tier = options.max_blocks_per_tier;
      source->label = SourceLabel(spec);
      // Several --source entries may name the same worker and rank (the
      // rank comes from the envelope); keep metric series distinct.
      if (label_count[source->label] > 1) source->label += strings::Cat("@", spec.pub_endpoint);
      source->metrics = probe.AddSource(source->label, spec.engine);
      sources.push_back(std::move(source));
    }
  }

  // BatchSink: stamps and publishes one engine batch (source threads).
  void PublishBatch(std::vector<PlacementEvent>* events) override {
    MutexLock lock(&publish_mu);
    const uint64_t now_ns = WallClockNs();
    for (PlacementEvent& event : *events) {
      event.agent = options.node;
      event.event_id = next_event_id++;
      event.timestamp_ns = now_ns;
    }
    PublishLocked(*events);
  }

  // Publishes with retry until it succeeds or the pipeline stops. The same
  // event_ids are re-sent, so a log with (agent, event_id) de-duplication
  // keeps exactly one copy after a partial failure.
  void PublishLocked(std::span<const PlacementEvent> events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(publish_mu) {
    auto backoff = kRetryMin;
    probe.SetPending(events.size());
    while (true) {
      const auto start = std::chrono::steady_clock::now();
      const Status status = publisher->Publish(events);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      probe.ObservePublish(seconds, events.size(), status.ok());
      if (status.ok()) break;
      if (absl::IsFailedPrecondition(status)) {
        // Stopped or closed for good (PlacementPublisher): a retry cannot
        // succeed, and would hold publish_mu until the pipeline stops.
        log::Get("ingest")->warn("dropped {} events: {}", events.size(), status.ToString());
        break;
      }
      uint64_t suppressed = 0;
      if (publish_warnings.Allow(&suppressed)) {
        log::Get("ingest")->warn("publish of {} events failed: {} (retrying; {} suppressed)",
                                 events.size(), status.ToString(), suppressed);
      }
      if (!WaitUnlessStopping(backoff)) {
        log::Get("ingest")->warn("stopping: dropped {} unpublished events", events.size());
        break;
      }
      backoff = std::min(backoff * 2, kRetryMax);
    }
    probe.SetPending(0);
  }

  // Sleeps for `duration` unless Stop() is requested; false when stopping.
  bool WaitUnlessStopping(std::chrono::milliseconds duration) {
    return !stop_signal.WaitFor(duration);
  }

  Status Start() {
    if (running) return absl::OkStatus();
    KVINDEX_RETURN_IF_ERROR(options.Validate());
    stop.store(false);
    stop_signal.Reset();
    context = std::make_unique<zmq::context_t>(1);
    // libzmq's default socket cap (1,023) holds about 340 sources.
    if (Status status = internal::SizeZmqContext(*context, sources.size()); !status.ok()) {
      context.reset();
      return status;
    }
    env = {.options = &options,
           .context = context.get(),
           .stop = &stop,
           .pause = &pause,
           .wait = [this](std::chrono::milliseconds d) { return WaitUnlessStopping(d); },
           .publish_snapshot = [this](Source* source) { PublishSnapshot(source); },
           .io_warnings = &io_warnings,
           .cap_warnings = &cap_warnings};
    // Open every socket first, so a bad endpoint fails Start before anything
    // is published.
    for (auto& source : sources) {
      Status status = source->Open(env);
      if (!status.ok()) {
        CloseAll();
        return status;
      }
    }
    {
      MutexLock lock(&publish_mu);
      next_event_id = std::max(next_event_id, WallClockNs());
    }
    for (auto& source : sources) {
      source->ready.store(false);
      ResetSession(*source);
    }
    const std::vector<bool> resumed = ResumeSaved();
    resumed_count.store(std::count(resumed.begin(), resumed.end(), true));
    for (size_t i = 0; i < sources.size(); ++i) {
      if (!resumed[i]) sources[i]->session->PublishStartupClear();
    }
    PublishHeartbeat();
    for (auto& source : sources) {
      Source* s = source.get();
      s->thread = std::thread([this, s] { s->Run(env); });
    }
    heartbeat_thread = std::thread([this] { RunHeartbeats(); });
    running = true;
    return absl::OkStatus();
  }

  // Restores the saved states (SetResumeStates) into the new sessions
  // (internal/resume_plan.h); which sources resumed.
  std::vector<bool> ResumeSaved() {
    std::vector<internal::ResumeSource> targets;
    for (const auto& source : sources) targets.push_back({&source->spec, &source->label});
    std::vector<bool> resumed = internal::ResumeSaved(
        std::move(saved), targets, [this](size_t i) { return sources[i]->session.get(); },
        [this](size_t i) { ResetSession(*sources[i]); }, consistent);
    saved.clear();
    consistent = nullptr;
    return resumed;
  }

  // A fresh session for `source`: no sequence seen, nothing held.
  void ResetSession(Source& source) {
    SessionOptions session_options;
    session_options.replay_cooldown = options.replay_cooldown;
    source.counters.has_seq.store(false);
    source.counters.last_seq.store(0);
    source.session = std::make_unique<SourceSession>(source.spec, session_options, &source.stats,
                                                     &source.counters, source.replay.get(), this);
  }

  void PublishSnapshot(Source* source) {
    std::vector<PlacementEvent> events;
    source->session->processor().Snapshot(&events);
    PublishBatch(&events);
    probe.CountSnapshot();
    log::Get("ingest")->info("source {}: snapshot published ({} events)", source->label,
                             events.size());
  }

  void PublishHeartbeat() {
    std::vector<PlacementEvent> events(1);
    PlacementEvent& heartbeat = events[0];
    heartbeat.kind = PlacementKind::kHeartbeat;
    heartbeat.lease_ms = options.heartbeat_lease_ms;
    for (const auto& source : sources) {
      heartbeat.sources.push_back({source->spec.worker, source->spec.dp_rank});
      // endpoint=HOST:PORT travels with the source (docs/epp.md, "Endpoints").
      if (!source->spec.endpoint.empty()) {
        heartbeat.endpoints.push_back({{source->spec.worker, source->spec.dp_rank},
                                       source->spec.model,
                                       source->spec.endpoint});
      }
    }
    PublishBatch(&events);
    probe.CountHeartbeat();
  }

  void RunHeartbeats() {
    const auto interval = options.heartbeat_interval.count() > 0
                              ? options.heartbeat_interval
                              : std::chrono::milliseconds(options.heartbeat_lease_ms / 3 + 1);
    while (WaitUnlessStopping(interval)) PublishHeartbeat();
  }

  void Stop() {
    if (!running) return;
    stop.store(true);
    stop_signal.Raise();
    pause.End();
    for (auto& source : sources) {
      if (source->thread.joinable()) source->thread.join();
    }
    if (heartbeat_thread.joinable()) heartbeat_thread.join();
    CloseAll();
    running = false;
  }

  void CloseAll() {
    for (auto& source : sources) {
      source->metrics->Sync(source->stats, source->counters, false);
      source->Close();
    }
    context.reset();
  }

  const AgentOptions options;
  PlacementPublisher* const publisher;
  AgentProbe probe;
  std::vector<std::unique_ptr<Source>> sources;
  std::unique_ptr<zmq::context_t> context;
  std::thread heartbeat_thread;
  std::atomic<bool> running{false};  // written by the controlling thread

  std::atomic<bool> stop{false};
  StopSignal stop_signal;  // wakes sleepers; `stop` is the flag hot loops read

  // Before the next Start (SetResumeStates).
  std::vector<SavedSource> saved;
  std::function<bool(const std::vector<HeldBlocks>&)> consistent;
  std::atomic<size_t> resumed_count{0};

  // Pausing the source threads between engine batches (PauseSources).
  internal::PauseGate pause;

  // Serializes stamping + Publish: event_id order = publish order.
  Mutex publish_mu;
  uint64_t next_event_id ABSL_GUARDED_BY(publish_mu) = 1;
  log::RateLimiter publish_warnings{std::chrono::seconds(10)};
  log::RateLimiter io_warnings{std::chrono::seconds(10)};
  log::RateLimiter cap_warnings{std::chrono::seconds(10)};
  internal::SourceRunnerEnv env;  // set by Start
};

AgentPipeline::AgentPipeline(AgentOptions options, PlacementPublisher* publisher,
                             prometheus::Registry* registry)
    : impl_(std::make_unique<Impl>(std::move(options), publisher, registry)) {}

AgentPipeline::~AgentPipeline() { Stop(); }

Status AgentPipeline::Start() { return impl_->Start(); }

void AgentPipeline::Stop() { impl_->Stop(); }

void AgentPipeline::SetResumeStates(
    std::vector<SavedSource> states,
    std::function<bool(const std::vector<HeldBlocks>&)> consistent) {
  impl_->saved = std::move(states);
  impl_->consistent = std::move(consistent);
}

bool AgentPipeline::PauseSources(std::chrono::milliseconds timeout) {
  return impl_->pause.Pause(timeout, impl_->sources.size(), impl_->running);
}

std::vector<SavedSource> AgentPipeline::SaveSources() const {
  std::vector<SavedSource> out;
  for (const auto& source : impl_->sources) {
    if (source->session == nullptr) continue;
    SavedSource& saved = out.emplace_back();
    saved.key = FormatSourceSpec(source->spec);
    source->session->SaveState(&saved.state);
  }
  return out;
}

void AgentPipeline::ResumeSources() { impl_->pause.End(); }

size_t AgentPipeline::resumed_sources() const { return impl_->resumed_count.load(); }

bool AgentPipeline::Ready() const {
  if (!impl_->running) return false;
  for (const auto& source : impl_->sources) {
    if (!source->ready.load()) return false;
  }
  return true;
}

void AgentPipeline::RequestSnapshots(bool all, const std::vector<SourceKey>& sources) {
  for (const auto& source : impl_->sources) {
    bool wanted = all;
    for (const SourceKey& key : sources) wanted |= key.worker == source->spec.worker;
    if (wanted) source->snapshot_wanted.store(true);
  }
}

std::vector<AgentPipeline::SourceStatus> AgentPipeline::Sources() const {
  std::vector<SourceStatus> out;
  out.reserve(impl_->sources.size());
  for (const auto& source : impl_->sources) {
    const SessionCounters& c = source->counters;
    SourceStatus status;
    status.worker = source->spec.worker;
    status.dp_rank = source->spec.dp_rank;
    status.model = source->spec.model;
    status.last_seq = c.last_seq.load();
    status.has_seq = c.has_seq.load();
    status.gaps = c.gaps.load();
    status.replays_ok = c.replays_ok.load();
    status.replays_failed = c.replays_failed.load();
    status.restarts = c.restarts.load();
    out.push_back(std::move(status));
  }
  return out;
}

}  // namespace kvindex::ingest
