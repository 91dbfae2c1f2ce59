// ApplyLoop: the single writer of the index. Reads the ordered placement log
// through a LogReader (InProcessLogReader in --embedded mode,
// JetStreamLogReader for replicated routers: one loop, two logs) and applies
// each message's events at the message's log position.
//
//   InProcessSink sink;
//   InProcessLogReader reader(&sink);
//   KvIndex index;
//   ApplyLoop loop(&reader, &index, &probe, {});
//   KVINDEX_RETURN_IF_ERROR(loop.Start());
//   ... loop.CaughtUp() ...
//   loop.Stop();
//
// Per message, in log order: the AgentTable admits it (a message that may
// not speak for what it says is refused whole and counted by reason, stale
// messages are skipped; after a sender gap the agent's sources are cleared
// first, fail closed), the SourceQuota drops the events of sources a node
// may not add to a model near its source limit (counted as
// model_sources_full), agent_expired events are decided into clears, events
// of models outside ApplyOptions::models (when set) are left out, and the
// rest is applied at the message's position, which always advances
// applied_seq. Besides applying, it remembers per source the agent that
// announced it and the time of its last event (GET /v1/workers), from what
// reached the index only, and reports per-batch counts and lag to the
// RouterProbe.
//
// Threading: Start opens the reader from the apply thread (retrying with
// backoff while the log is unreachable), so a router starts before its log
// does. A slow query never stalls apply (the index's readers are lock-free);
// a slow apply never blocks the log client (the reader bounds what it
// buffers).
//
// Thread safety: Start/Stop from one controlling thread (idempotent; Start
// after Stop resumes at applied_seq + 1). The accessors are safe from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/consume/agent_table.h"
#include "shared/consume/log_reader.h"
#include "shared/consume/node_warnings.h"
#include "shared/consume/router_probe.h"
#include "shared/consume/source_quota.h"
#include "shared/index/index_interface.h"
#include "shared/log/log.h"
#include "shared/model/source_key.h"

namespace kvindex::consume {

struct ApplyOptions {
  // Models to index; empty = every model. Default: empty. Not reloadable.
  std::vector<std::string> models;
  // Most events read per batch. Default: 4096.
  size_t batch = 4096;
  // Wait between attempts to open an unreachable log (doubles up to 5 s).
  // Default: 100 ms.
  std::chrono::milliseconds open_retry{100};
  // Authority, incarnation, node and tombstone bounds of the agent table;
  // max_nodes also sizes each node's share of a model (SourceQuota).
  AgentTableOptions agents;
  // Called on the writer thread with the events of each message right after
  // the index applied them (expiries as the clears they became): the
  // endpoint picker's speculative entries learn of removals. Default: none.
  std::function<void(std::span<const PlacementEvent>)> on_applied;
};

class ApplyLoop {
 public:
  struct SourceActivity {
    SourceKey source;
    std::string model;           // last non-empty model seen for the source
    std::string agent;           // node id of the agent that published it
    uint64_t last_event_ns = 0;  // agent timestamp of its last event (ns since epoch)
    uint64_t events = 0;         // events applied for it
    // Its last event was a clear, or its worker or agent expired: it holds
    // nothing since (unless a store follows).
    bool cleared = false;
    // Listed in its agent's heartbeats since the agent last expired.
    bool live = false;
    // The endpoint ("host:port") and model its agent's last heartbeat
    // announced for it ("" = none); gone with the source's expiry.
    std::string endpoint;
    std::string endpoint_model;
  };

  // `reader`, `index` and `probe` (nullable) must outlive the loop.
  ApplyLoop(LogReader* reader, index::IndexInterface* index, RouterProbe* probe,
            ApplyOptions options);
  ~ApplyLoop();
  ApplyLoop(const ApplyLoop&) = delete;
  ApplyLoop& operator=(const ApplyLoop&) = delete;

  Status Start();
  void Stop();

  // True once the reader is open and every message that was in the log when
  // it opened has been applied.
  bool CaughtUp() const;
  // Log messages known to exist and not applied yet.
  uint64_t Pending() const;
  // Log position of the last message processed (applied or skipped).
  uint64_t position() const { return position_.load(std::memory_order_acquire); }

  // Runs `task` on the writer thread between two batches (or right here when
  // the loop is not running) and returns once it ran: the index and the
  // agent table hold still for it (a checkpoint capture). Apply pauses for
  // as long as `task` runs.
  void RunOnWriter(const std::function<void()>& task);

  std::vector<SourceActivity> Activity() const;
  const AgentTable& agents() const { return agents_; }
  AgentTable& agents() { return agents_; }

 private:
  void Run();
  bool OpenReader();  // false when stopping
  void SleepUnlessStopping(std::chrono::milliseconds duration);
  void ApplyBatch(const LogBatch& batch);
  // Per source, from the events that reached the index (`applied`) and the
  // sources an expiry took away (`expired`), under mu_.
  void RecordActivity(std::span<const PlacementEvent> applied, std::span<const SourceKey> expired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunWriterTasks();

  LogReader* const reader_;
  index::IndexInterface* const index_;
  RouterProbe* const probe_;
  const ApplyOptions options_;
  AgentTable agents_;
  SourceQuota quota_;

  std::thread thread_;  // Start and Stop only (one owner thread)
  std::atomic<bool> stop_{false};
  Mutex stop_mu_;  // with stop_cv_: wakes the writer for Stop and RunOnWriter
  // From Start until Stop joined the writer: RunOnWriter hands tasks over
  // (never runs one beside a writer that is still applying).
  bool running_ ABSL_GUARDED_BY(stop_mu_) = false;
  CondVar stop_cv_;
  std::atomic<bool> open_{false};
  std::atomic<uint64_t> position_{0};

  // RunOnWriter: one task at a time, handed over under stop_mu_.
  Mutex task_mu_;
  const std::function<void()>* task_ ABSL_GUARDED_BY(stop_mu_) = nullptr;
  std::atomic<bool> task_pending_{false};
  CondVar task_done_cv_;

  // Apply thread only: scratch reused across messages.
  std::vector<PlacementEvent> clears_;
  std::vector<PlacementEvent> expansion_;
  std::vector<PlacementEvent> rewritten_;
  std::vector<SourceKey> expired_sources_;
  std::vector<uint8_t> quota_refused_;
  log::RateLimiter refusal_warnings_{std::chrono::seconds(10)};
  // too_many_nodes and model_sources_full: once per node per interval.
  NodeWarnings quota_warnings_{std::chrono::seconds(10)};
  log::RateLimiter exhausted_warnings_{std::chrono::seconds(10)};

  mutable Mutex mu_;
  absl::flat_hash_map<SourceKey, SourceActivity> activity_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvindex::consume
