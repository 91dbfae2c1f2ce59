// AgentProbe: the agent's Prometheus metrics (names kvindex_agent_*, counters
// end in _total), kept out of the ingest logic.
//
// The hot path never touches prometheus objects per block or per event: the
// processor's SourceStats and the session's SessionCounters are plain
// atomics, and SourceMetrics::Sync exports their deltas into counters bound
// in advance (one call per engine batch and on idle ticks, from the source's
// own thread). Publish latency is observed once per Publish call.
//
//   AgentProbe probe(registry);                     // registry may be null: no-op
//   SourceMetrics* m = probe.AddSource("w0/0", wire::EngineKind::kVllm);
//   m->Sync(stats, counters);                       // after each batch
//
// Families:
//   kvindex_agent_events_dropped_total{source,reason}
//   kvindex_agent_events_received_total{source,engine,type}   stored|removed|cleared|unknown
//   kvindex_agent_blocks_received_total{source,engine,type}   stored|removed
//   kvindex_agent_batches_received_total{source,engine}
//   kvindex_agent_decode_errors_total{source}
//   kvindex_agent_placements_total{source,kind}               stored|removed|cleared
//   kvindex_agent_frames_invalid_total{source,reason} frame_count|seq_length|replay_delimiter
//   kvindex_agent_gaps_total{source}
//   kvindex_agent_replays_total{source,result}                ok|failed|skipped
//   kvindex_agent_replayed_batches_total{source}
//   kvindex_agent_replay_overlap_skipped_total{source}
//   kvindex_agent_restarts_total{source}
//   kvindex_agent_clears_total{source,cause}                  see ClearCauseLabel
//   kvindex_agent_last_sequence{source}                       gauge (double: exact below 2^53)
//   kvindex_agent_tracked_blocks{source}                      gauge: engine hashes held
//   kvindex_agent_source_ready{source}                        gauge 0/1
//   kvindex_agent_publish_latency_seconds                     histogram, per Publish call
//   kvindex_agent_publish_pending_events                      gauge: events awaiting publish
//   kvindex_agent_published_events_total / kvindex_agent_publish_errors_total
//   kvindex_agent_heartbeats_total
//   kvindex_agent_snapshots_total
//
// Thread safety: AddSource before the sources' threads start. Each
// SourceMetrics is synced by one thread; the agent-level handles are
// prometheus objects (thread-safe).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/ingest/source_session.h"
#include "shared/normalize/source_processor.h"
#include "shared/wire/engine_kind.h"

namespace kvindex::ingest {

// A counter fed from a monotonic uint64 source; null handle = disabled.
class BoundCounter {
 public:
  BoundCounter() = default;
  explicit BoundCounter(prometheus::Counter* counter) : counter_(counter) {}
  void Sync(uint64_t value) {
    if (counter_ != nullptr && value > exported_) {
      counter_->Increment(static_cast<double>(value - exported_));
      exported_ = value;
    }
  }

 private:
  prometheus::Counter* counter_ = nullptr;
  uint64_t exported_ = 0;
};

class SourceMetrics {
 public:
  // Exports everything that changed since the last call.
  void Sync(const normalize::SourceStats& stats, const SessionCounters& counters, bool ready);
  // SUB connections lost so far (the source thread counts them).
  void SyncDisconnects(uint64_t total) { sub_disconnects_.Sync(total); }

 private:
  friend class AgentProbe;
  std::vector<std::pair<int, BoundCounter>> dropped_;  // (DropReason, counter)
  BoundCounter events_[4];
  BoundCounter blocks_[2];
  BoundCounter batches_, decode_errors_, placements_[3];
  BoundCounter frames_invalid_[kNumFrameErrors];
  BoundCounter gaps_, replays_ok_, replays_failed_, replays_skipped_, replayed_batches_,
      overlap_skipped_, restarts_, sub_disconnects_;
  BoundCounter clears_[kNumClearCauses];
  prometheus::Gauge* last_seq_ = nullptr;
  prometheus::Gauge* tracked_blocks_ = nullptr;
  prometheus::Gauge* ready_ = nullptr;
};

class AgentProbe {
 public:
  // `registry` may be null: every handle is then a no-op.
  explicit AgentProbe(prometheus::Registry* registry);

  // Series for one source; the pointer stays valid for the probe's lifetime.
  SourceMetrics* AddSource(const std::string& source_label, wire::EngineKind engine);

  void ObservePublish(double seconds, size_t events, bool ok);
  void SetPending(size_t events);
  void CountHeartbeat();
  void CountSnapshot();

 private:
  prometheus::Registry* const registry_;
  std::vector<std::unique_ptr<SourceMetrics>> sources_;
  prometheus::Histogram* publish_latency_ = nullptr;
  prometheus::Gauge* pending_ = nullptr;
  prometheus::Counter* published_ = nullptr;
  prometheus::Counter* publish_errors_ = nullptr;
  prometheus::Counter* heartbeats_ = nullptr;
  prometheus::Counter* snapshots_ = nullptr;
};

}  // namespace kvindex::ingest
