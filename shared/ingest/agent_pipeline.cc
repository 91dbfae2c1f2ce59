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
#include "shared/ingest/internal/zmq_capacity.h"
#include "shared/ingest/internal/zmq_util.h"
#include "shared/ingest/replay_client.h"
#include "shared/ingest/source_session.h"
#include "shared/log/log.h"

namespace kvindex::ingest {
namespace {

constexpr std::chrono::milliseconds kPollInterval{100};
// Messages handled per wake-up before metrics are synced again.
constexpr int kMaxMessagesPerWake = 1024;
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
  struct Source {
    SourceSpec spec;
    std::string label;
    normalize::SourceStats stats;
    SessionCounters counters;
    SourceMetrics* metrics = nullptr;
    std::atomic<bool> ready{false};
    std::atomic<bool> snapshot_wanted{false};
    // Per run; owned by the source's thread while it runs.
    std::unique_ptr<zmq::socket_t> sub;
    internal::DisconnectMonitor sub_monitor;
    uint64_t sub_disconnects = 0;  // source thread only
    uint64_t capped_reported = 0;  // source thread only
    std::unique_ptr<ZmqReplayClient> replay;
    std::unique_ptr<SourceSession> session;
    std::thread thread;
  };

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
    // Open every socket first, so a bad endpoint fails Start before anything
    // is published.
    for (auto& source : sources) {
      Status status = OpenSockets(*source);
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
      s->thread = std::thread([this, s] { RunSource(s); });
    }
    heartbeat_thread = std::thread([this] { RunHeartbeats(); });
    running = true;
    return absl::OkStatus();
  }

  Status OpenSockets(Source& source) {
    try {
      source.sub = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::sub);
      source.sub->set(zmq::sockopt::linger, 0);
      source.sub->set(zmq::sockopt::rcvhwm, options.receive_hwm);
      source.sub->set(zmq::sockopt::subscribe, "");
      source.sub->set(zmq::sockopt::maxmsgsize, options.max_message_bytes);
    } catch (const zmq::error_t& error) {
      return internal::ZmqError(error, "SUB socket for " + source.label);
    }
    KVINDEX_RETURN_IF_ERROR(source.sub_monitor.Attach(*context, *source.sub));
    KVINDEX_RETURN_IF_ERROR(
        internal::Attach(*source.sub, source.spec.pub_endpoint, source.spec.pub_bind));
    if (!source.spec.replay_endpoint.empty()) {
      source.replay = std::make_unique<ZmqReplayClient>(
          context.get(),
          ReplayClientOptions{.endpoint = source.spec.replay_endpoint,
                              .timeout = options.replay_timeout,
                              .max_message_bytes = options.max_message_bytes},
          &stop, &source.counters);
    }
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

  void RunSource(Source* source) {
    source->session->StartupReplay();
    source->ready.store(true);
    source->metrics->Sync(source->stats, source->counters, true);
    internal::Multipart message;
    while (!stop.load(std::memory_order_relaxed)) {
      pause.Park(stop);
      if (stop.load()) break;
      StatusOr<bool> readable = internal::WaitReadable(*source->sub, kPollInterval);
      if (!readable.ok()) {
        uint64_t suppressed = 0;
        if (io_warnings.Allow(&suppressed)) {
          log::Get("ingest")->warn("source {}: {} ({} suppressed)", source->label,
                                   readable.status().ToString(), suppressed);
        }
        WaitUnlessStopping(kPollInterval);
        continue;
      }
      if (!*readable) DrainDisconnects(source);
      if (source->snapshot_wanted.exchange(false)) PublishSnapshot(source);
      for (int i = 0; *readable && i < kMaxMessagesPerWake && !stop.load(); ++i) {
        StatusOr<bool> received = internal::ReceiveMultipart(*source->sub, &message);
        if (!received.ok() || !*received) break;
        if (message.oversized) {
          source->counters.frames_invalid[static_cast<int>(FrameError::kFrameCount)].fetch_add(
              1, std::memory_order_relaxed);
          continue;
        }
        source->session->OnLiveFrames(message.frames);
      }
      DrainDisconnects(source);
      ReportCapped(source);
      source->metrics->Sync(source->stats, source->counters, true);
    }
  }

  // Counts the SUB connections libzmq dropped (a message over
  // max_message_bytes, or the engine went away), with a rate-limited line.
  void DrainDisconnects(Source* source) {
    const uint64_t lost = source->sub_monitor.Drain();
    if (lost == 0) return;
    source->sub_disconnects += lost;
    source->metrics->SyncDisconnects(source->sub_disconnects);
    // libzmq does not reconnect after a protocol error (an oversized message
    // is one): connect again, or the source would stay silent for good.
    // Harmless after an ordinary disconnect. A bound SUB waits for the
    // engine to reconnect, which it does.
    if (!source->spec.pub_bind) {
      try {
        source->sub->disconnect(source->spec.pub_endpoint);
      } catch (const zmq::error_t&) {
        // Not connected any more: nothing to undo.
      }
      if (Status status = internal::Attach(*source->sub, source->spec.pub_endpoint, false);
          !status.ok()) {
        log::Get("ingest")->warn("source {}: reconnect failed: {}", source->label,
                                 status.ToString());
      }
    }
    uint64_t suppressed = 0;
    if (io_warnings.Allow(&suppressed)) {
      log::Get("ingest")->warn(
          "source {}: the engine connection dropped (a message over {} bytes, or the engine "
          "went away); {} so far ({} lines suppressed)",
          source->label, options.max_message_bytes, source->sub_disconnects, suppressed);
    }
  }

  // A rate-limited line when stored events hit the per-tier block cap (the
  // count itself is in kvindex_agent_events_dropped_total{reason="block_cap"}).
  void ReportCapped(Source* source) {
    const uint64_t capped = source->stats.dropped[static_cast<int>(DropReason::kBlockCap)].load(
        std::memory_order_relaxed);
    if (capped == source->capped_reported) return;
    uint64_t suppressed = 0;
    if (cap_warnings.Allow(&suppressed)) {
      log::Get("ingest")->warn(
          "source {}: {} blocks not indexed so far: the source holds {} blocks on a tier "
          "(--max-blocks-per-tier) ({} lines suppressed)",
          source->label, capped, options.max_blocks_per_tier, suppressed);
      source->capped_reported = capped;
    }
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
      source->ready.store(false);
      source->session.reset();
      source->replay.reset();
      source->sub_monitor.Detach();
      source->sub.reset();  // linger 0: closes at once
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
