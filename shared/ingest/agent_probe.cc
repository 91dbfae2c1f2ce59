#include "shared/ingest/agent_probe.h"

#include <prometheus/family.h>

#include "shared/model/drop_reason.h"

namespace kvindex::ingest {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Labels;

constexpr const char* kEventTypes[4] = {"stored", "removed", "cleared", "unknown"};
constexpr const char* kBlockTypes[2] = {"stored", "removed"};
constexpr const char* kPlacementKinds[3] = {"stored", "removed", "cleared"};

prometheus::Counter* Counter(prometheus::Registry* registry, const std::string& name,
                             const std::string& help, const Labels& labels) {
  return &BuildCounter().Name(name).Help(help).Register(*registry).Add(labels);
}

prometheus::Gauge* Gauge(prometheus::Registry* registry, const std::string& name,
                         const std::string& help, const Labels& labels) {
  return &BuildGauge().Name(name).Help(help).Register(*registry).Add(labels);
}

}  // namespace

void SourceMetrics::Sync(const normalize::SourceStats& stats, const SessionCounters& counters,
                         bool ready) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  for (auto& [reason, counter] : dropped_) counter.Sync(stats.dropped[reason].load(kRelaxed));
  for (int i = 0; i < 4; ++i) events_[i].Sync(stats.events_received[i].load(kRelaxed));
  for (int i = 0; i < 2; ++i) blocks_[i].Sync(stats.blocks_received[i].load(kRelaxed));
  batches_.Sync(stats.batches.load(kRelaxed));
  decode_errors_.Sync(stats.decode_errors.load(kRelaxed));
  placements_[0].Sync(stats.placements_stored.load(kRelaxed));
  placements_[1].Sync(stats.placements_removed.load(kRelaxed));
  placements_[2].Sync(stats.clears.load(kRelaxed));
  for (int i = 0; i < kNumFrameErrors; ++i) {
    frames_invalid_[i].Sync(counters.frames_invalid[i].load(kRelaxed));
  }
  gaps_.Sync(counters.gaps.load(kRelaxed));
  replays_ok_.Sync(counters.replays_ok.load(kRelaxed));
  replays_failed_.Sync(counters.replays_failed.load(kRelaxed));
  replays_skipped_.Sync(counters.replays_skipped.load(kRelaxed));
  replayed_batches_.Sync(counters.replayed_batches.load(kRelaxed));
  overlap_skipped_.Sync(counters.overlap_skipped.load(kRelaxed));
  restarts_.Sync(counters.restarts.load(kRelaxed));
  for (int i = 0; i < kNumClearCauses; ++i) clears_[i].Sync(counters.clears[i].load(kRelaxed));
  if (last_seq_ != nullptr) {
    last_seq_->Set(static_cast<double>(counters.last_seq.load(kRelaxed)));
    tracked_blocks_->Set(static_cast<double>(counters.tracked_blocks.load(kRelaxed)));
    ready_->Set(ready ? 1 : 0);
  }
}

AgentProbe::AgentProbe(prometheus::Registry* registry) : registry_(registry) {
  if (registry_ == nullptr) return;
  publish_latency_ =
      &BuildHistogram()
           .Name("kvindex_agent_publish_latency_seconds")
           .Help("Time of one Publish call (one engine batch) into the placement publisher")
           .Register(*registry_)
           .Add({}, prometheus::Histogram::BucketBoundaries{0.00001, 0.00005, 0.0001, 0.0005, 0.001,
                                                            0.005, 0.01, 0.05, 0.1, 0.5, 1, 5});
  pending_ = Gauge(registry_, "kvindex_agent_publish_pending_events",
                   "Placement events waiting to be published (retrying after an error)", {});
  published_ = Counter(registry_, "kvindex_agent_published_events_total",
                       "Placement events handed to the publisher", {});
  publish_errors_ = Counter(registry_, "kvindex_agent_publish_errors_total",
                            "Publish calls that failed (and were retried)", {});
  heartbeats_ =
      Counter(registry_, "kvindex_agent_heartbeats_total", "Agent heartbeats published", {});
  snapshots_ = Counter(registry_, "kvindex_agent_snapshots_total",
                       "Source snapshots published (cleared + the full current set), on a router's "
                       "or the publisher's request",
                       {});
}

SourceMetrics* AgentProbe::AddSource(const std::string& source_label, wire::EngineKind engine) {
  auto metrics = std::make_unique<SourceMetrics>();
  SourceMetrics* m = metrics.get();
  sources_.push_back(std::move(metrics));
  if (registry_ == nullptr) return m;
  prometheus::Registry* r = registry_;
  const std::string engine_name(wire::EngineKindName(engine));
  const Labels source{{"source", source_label}};
  for (int reason = 1; reason < kNumDropReasons; ++reason) {
    m->dropped_.emplace_back(
        reason, BoundCounter(Counter(
                    r, "kvindex_agent_events_dropped_total",
                    "Engine events (or blocks, for block_not_found/unresolved_placeholder) dropped",
                    {{"source", source_label},
                     {"reason", std::string(DropReasonLabel(static_cast<DropReason>(reason)))}})));
  }
  for (int i = 0; i < 4; ++i) {
    m->events_[i] = BoundCounter(
        Counter(r, "kvindex_agent_events_received_total", "Engine events received, by type",
                {{"source", source_label}, {"engine", engine_name}, {"type", kEventTypes[i]}}));
  }
  for (int i = 0; i < 2; ++i) {
    m->blocks_[i] = BoundCounter(
        Counter(r, "kvindex_agent_blocks_received_total", "Engine blocks received, by event type",
                {{"source", source_label}, {"engine", engine_name}, {"type", kBlockTypes[i]}}));
  }
  m->batches_ = BoundCounter(Counter(r, "kvindex_agent_batches_received_total",
                                     "Engine batches decoded (live and replayed)",
                                     {{"source", source_label}, {"engine", engine_name}}));
  m->decode_errors_ =
      BoundCounter(Counter(r, "kvindex_agent_decode_errors_total",
                           "Payloads that did not decode (source cleared)", source));
  for (int i = 0; i < 3; ++i) {
    m->placements_[i] = BoundCounter(
        Counter(r, "kvindex_agent_placements_total", "Placement events produced, by kind",
                {{"source", source_label}, {"kind", kPlacementKinds[i]}}));
  }
  for (int i = 1; i < kNumFrameErrors; ++i) {
    m->frames_invalid_[i] = BoundCounter(
        Counter(r, "kvindex_agent_frames_invalid_total", "Malformed ZMQ messages dropped",
                {{"source", source_label},
                 {"reason", std::string(FrameErrorLabel(static_cast<FrameError>(i)))}}));
  }
  m->sub_disconnects_ = BoundCounter(
      Counter(r, "kvindex_agent_sub_disconnects_total",
              "Engine SUB connections dropped: a message over --zmq-max-message-bytes (libzmq "
              "drops the connection unread) or the engine went away",
              source));
  m->gaps_ = BoundCounter(
      Counter(r, "kvindex_agent_gaps_total", "Sequence gaps (live and inside replays)", source));
  auto replays = [&](const char* result) {
    return BoundCounter(Counter(r, "kvindex_agent_replays_total",
                                "Replay attempts by result (skipped = inside the cooldown)",
                                {{"source", source_label}, {"result", result}}));
  };
  m->replays_ok_ = replays("ok");
  m->replays_failed_ = replays("failed");
  m->replays_skipped_ = replays("skipped");
  m->replayed_batches_ = BoundCounter(Counter(r, "kvindex_agent_replayed_batches_total",
                                              "Batches applied from replay streams", source));
  m->overlap_skipped_ =
      BoundCounter(Counter(r, "kvindex_agent_replay_overlap_skipped_total",
                           "Batches skipped because their seq was already applied", source));
  m->restarts_ =
      BoundCounter(Counter(r, "kvindex_agent_restarts_total",
                           "Engine restarts detected (seq backwards or new epoch)", source));
  for (int i = 0; i < kNumClearCauses; ++i) {
    m->clears_[i] = BoundCounter(
        Counter(r, "kvindex_agent_clears_total", "Source clears, by cause",
                {{"source", source_label},
                 {"cause", std::string(ClearCauseLabel(static_cast<ClearCause>(i)))}}));
  }
  m->last_seq_ = Gauge(r, "kvindex_agent_last_sequence", "Last engine seq applied", source);
  m->tracked_blocks_ = Gauge(r, "kvindex_agent_tracked_blocks",
                             "Engine block hashes the agent tracks for the source", source);
  m->ready_ = Gauge(r, "kvindex_agent_source_ready",
                    "1 once the source finished its start-up replay attempt", source);
  return m;
}

void AgentProbe::ObservePublish(double seconds, size_t events, bool ok) {
  if (registry_ == nullptr) return;
  publish_latency_->Observe(seconds);
  if (ok) {
    published_->Increment(static_cast<double>(events));
  } else {
    publish_errors_->Increment();
  }
}

void AgentProbe::SetPending(size_t events) {
  if (pending_ != nullptr) pending_->Set(static_cast<double>(events));
}

void AgentProbe::CountSnapshot() {
  if (snapshots_ != nullptr) snapshots_->Increment();
}

void AgentProbe::CountHeartbeat() {
  if (heartbeats_ != nullptr) heartbeats_->Increment();
}

}  // namespace kvindex::ingest
