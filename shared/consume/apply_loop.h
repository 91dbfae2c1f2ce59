// ApplyLoop: the single writer of the index. Drains the ordered placement
// log (InProcessSink in --embedded mode), assigns log positions 1, 2, 3, ...
// in drain order and applies each event to the index.
//
//   InProcessSink sink;
//   KvIndex index;
//   ApplyLoop loop(&sink, &index, &probe, {});
//   KVINDEX_RETURN_IF_ERROR(loop.Start());
//   ... loop.CaughtUp() ...
//   loop.Stop();
//
// Besides applying, it remembers per source the agent that announced it and
// the time of its last event (GET /v1/workers), and reports per-batch counts
// and lag to the RouterProbe. Events of models outside ApplyOptions::models
// (when set) are still given a log position but not applied.
//
// Thread safety: Start/Stop from one controlling thread (idempotent; Start
// after Stop resumes with the next log position). The accessors are safe
// from any thread.
//
// Invariants: log positions are strictly increasing and never reused within
// one ApplyLoop, so Apply() never sees a position at or below applied_seq
// (a restarted loop continues from the index's applied_seq).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/base/status.h"
#include "shared/consume/router_probe.h"
#include "shared/index/index_interface.h"
#include "shared/model/source_key.h"
#include "shared/publish/in_process_sink.h"

namespace kvindex::consume {

struct ApplyOptions {
  // Models to index; empty = every model. Default: empty. Not reloadable.
  std::vector<std::string> models;
  // Most events applied per drain. Default: 4096.
  size_t batch = 4096;
};

class ApplyLoop {
 public:
  struct SourceActivity {
    SourceKey source;
    std::string model;           // last non-empty model seen for the source
    std::string agent;           // node id of the agent that published it
    uint64_t last_event_ns = 0;  // agent timestamp of its last event (ns since epoch)
    uint64_t events = 0;         // events applied for it
  };

  // `sink`, `index` and `probe` (nullable) must outlive the loop.
  ApplyLoop(InProcessSink* sink, index::IndexInterface* index, RouterProbe* probe,
            ApplyOptions options);
  ~ApplyLoop();
  ApplyLoop(const ApplyLoop&) = delete;
  ApplyLoop& operator=(const ApplyLoop&) = delete;

  Status Start();
  void Stop();

  // Events drained and applied (or skipped) so far.
  uint64_t processed() const { return processed_.load(std::memory_order_acquire); }
  // True when every event published to the sink so far has been processed.
  bool CaughtUp() const;
  // Events published and not processed yet.
  uint64_t Pending() const;

  std::vector<SourceActivity> Activity() const;

 private:
  void Run();

  InProcessSink* const sink_;
  index::IndexInterface* const index_;
  RouterProbe* const probe_;
  const ApplyOptions options_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> processed_{0};
  uint64_t next_position_ = 1;  // apply thread only (and Start)

  mutable std::mutex mu_;
  absl::flat_hash_map<SourceKey, SourceActivity> activity_;  // guarded by mu_
};

}  // namespace kvindex::consume
