// SourceRunner: one engine source's I/O on the agent. Its SUB socket (and
// replay client) are opened before any source thread starts, so a bad
// endpoint fails AgentPipeline::Start before anything is published; Run is
// the source thread: start-up replay, then engine messages into the
// source's SourceSession until stop, parking at the pause gate between
// batches, reconnecting after a dropped connection, syncing metrics.
// Publishing (stamping, retries) stays with AgentPipeline (the
// SourceSession's BatchSink).
//
// Thread safety: Open/Close from the controlling thread while the source
// thread is not running; Run on the source's own thread; `ready` and
// `snapshot_wanted` from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "shared/base/status.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/ingest/agent_probe.h"
#include "shared/ingest/internal/disconnect_monitor.h"
#include "shared/ingest/internal/pause_gate.h"
#include "shared/ingest/replay_client.h"
#include "shared/ingest/source_session.h"
#include "shared/log/log.h"

namespace kvindex::ingest::internal {

class SourceRunner;

// What every source's runner shares with the pipeline (set by Start).
struct SourceRunnerEnv {
  const AgentOptions* options = nullptr;
  zmq::context_t* context = nullptr;
  const std::atomic<bool>* stop = nullptr;
  PauseGate* pause = nullptr;
  // Sleeps unless stopping; false when stopping.
  std::function<bool(std::chrono::milliseconds)> wait;
  // Publishes the source's snapshot (asked through snapshot_wanted).
  std::function<void(SourceRunner*)> publish_snapshot;
  log::RateLimiter* io_warnings = nullptr;  // shared by every source
  log::RateLimiter* cap_warnings = nullptr;
};

class SourceRunner {
 public:
  Status Open(const SourceRunnerEnv& env);
  void Run(const SourceRunnerEnv& env);
  void Close();

  SourceSpec spec;
  std::string label;
  normalize::SourceStats stats;
  SessionCounters counters;
  SourceMetrics* metrics = nullptr;
  std::atomic<bool> ready{false};
  std::atomic<bool> snapshot_wanted{false};
  // Per run; owned by the source's thread while it runs.
  std::unique_ptr<zmq::socket_t> sub;
  DisconnectMonitor sub_monitor;
  std::unique_ptr<ZmqReplayClient> replay;
  std::unique_ptr<SourceSession> session;
  std::thread thread;

 private:
  // Counts the SUB connections libzmq dropped and connects again.
  void DrainDisconnects(const SourceRunnerEnv& env);
  // A rate-limited line when stored events hit the per-tier block cap.
  void ReportCapped(const SourceRunnerEnv& env);

  uint64_t sub_disconnects_ = 0;  // source thread only
  uint64_t capped_reported_ = 0;  // source thread only
};

}  // namespace kvindex::ingest::internal
