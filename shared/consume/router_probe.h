// RouterProbe: every Prometheus metric of kvindex-router, in one place
// (docs/metrics.md lists them). Components call its cheap hooks; nothing
// here allocates or locks on the hot path:
//   - the apply loop adds per-batch counts (one atomic add per batch and
//     label combination, never per block),
//   - HTTP handlers record lookup latency in a lock-free fixed-bucket
//     histogram,
//   - index-derived gauges (entries per tier and model, bytes, sequence) are
//     computed at scrape time from the index itself.
//
// Thread safety: all hooks may be called from any thread. Bind() once,
// before serving.
//
// Invariants: label values come from closed sets (PlacementKindName,
// TierName, "applied"/"ignored", the endpoint enum below, LogRefusalLabel).
#pragma once

#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/consume/log_refusal.h"
#include "shared/index/index_interface.h"
#include "shared/metrics/metrics.h"
#include "shared/model/placement_event.h"
#include "shared/model/tier.h"

namespace kvindex::consume {

// Lock-free histogram with fixed bucket bounds, exported as a Prometheus
// histogram at scrape time.
class LatencyHistogram {
 public:
  // Upper bounds in seconds: 5us .. 100ms.
  static constexpr std::array<double, 14> kBounds = {5e-6,   10e-6,  25e-6, 50e-6,  100e-6,
                                                     250e-6, 500e-6, 1e-3,  2.5e-3, 5e-3,
                                                     10e-3,  25e-3,  50e-3, 100e-3};
  void Observe(double seconds);
  // Appends one histogram sample (cumulative buckets) to `family`.
  void Export(prometheus::MetricFamily& family,
              std::vector<prometheus::ClientMetric::Label> labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};  // last = +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// What happened to log messages besides being applied (one counter each).
enum class LogOutcome : uint8_t {
  kStale = 0,            // skipped: at or below its sender's last msg_seq
  kInvalid = 1,          // payload did not decode (sender's sources cleared)
  kAgentExpired = 2,     // an agent_expired event that cleared an agent
  kReadError = 3,        // the log could not be read (retried)
  kExpiryAppended = 4,   // agent_expired events this router appended
  kResyncRequested = 5,  // resync requests this router appended
  kPositionGap = 6,      // log positions missing before a message (retention)
  kIndexExhausted = 7,   // applied only in part: a model's index memory ran out
  // An expiry this router appended again under a fresh id: the first did
  // not take effect within a lease (pre-empted, or lost).
  kExpiryReproposed = 8,
};
inline constexpr int kNumLogOutcomes = 9;
std::string_view LogOutcomeLabel(LogOutcome outcome);

enum class Endpoint : uint8_t { kMatch = 0, kQuery = 1, kState = 2, kWorkers = 3 };
inline constexpr int kNumEndpoints = 4;
std::string_view EndpointLabel(Endpoint endpoint);

class RouterProbe {
 public:
  // Per-batch tallies the apply loop fills and hands over once per batch.
  struct ApplyTally {
    // [kind][applied=0/ignored=1][tier or kNumTiers for "none"]
    uint64_t counts[kNumPlacementKinds][2][kNumTiers + 1] = {};
    void Add(const PlacementEvent& event, bool applied);
  };

  RouterProbe() = default;

  // Sets what scrape time reads: `index` (nullable) and `pending` (events
  // published but not yet applied). Both must outlive the probe's use.
  void Bind(const index::IndexInterface* index, std::function<uint64_t()> pending);

  void RecordApply(const ApplyTally& tally, uint64_t applied_seq, double lag_seconds);
  void RecordLookup(Endpoint endpoint, double seconds) {
    lookup_[static_cast<int>(endpoint)].Observe(seconds);
  }
  // Age of the newest applied event when it was applied, in seconds.
  double lag_seconds() const { return lag_seconds_.load(std::memory_order_relaxed); }
  void RecordLog(LogOutcome outcome, uint64_t n) {
    log_[static_cast<int>(outcome)].fetch_add(n, std::memory_order_relaxed);
  }
  // Messages dropped whole before any event was applied (AgentTable::Admit).
  void RecordRefusal(LogRefusal refusal, uint64_t n) {
    refused_[static_cast<int>(refusal)].fetch_add(n, std::memory_order_relaxed);
  }
  // status class: 2 = 2xx, 4 = 4xx, 5 = 5xx.
  void RecordRequest(Endpoint endpoint, int status);

  // The collectable to pass to metrics::SerializeText next to the registry
  // (prometheus-cpp's Registry cannot hold foreign collectables).
  const prometheus::Collectable* collectable() const { return collectable_.get(); }
  std::vector<prometheus::MetricFamily> Collect() const;

 private:
  const index::IndexInterface* index_ = nullptr;
  std::function<uint64_t()> pending_;
  std::shared_ptr<metrics::CallbackCollectable> collectable_;

  std::atomic<uint64_t> applied_[kNumPlacementKinds][2][kNumTiers + 1] = {};
  std::atomic<uint64_t> applied_seq_{0};
  std::atomic<double> lag_seconds_{0};
  std::array<LatencyHistogram, kNumEndpoints> lookup_;
  std::atomic<uint64_t> requests_[kNumEndpoints][3] = {};  // 2xx, 4xx, 5xx
  std::atomic<uint64_t> log_[kNumLogOutcomes] = {};
  std::atomic<uint64_t> refused_[kNumLogRefusals] = {};
};

}  // namespace kvindex::consume
