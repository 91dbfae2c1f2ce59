// EmbeddedIngest: the agent pipeline running inside kvindex-router
// (--embedded): engines' ZMQ streams -> normalization -> InProcessSink, which
// the router's ApplyLoop drains. No NATS; one process, one node.
//
//   InProcessSink sink;
//   EmbeddedIngest ingest(agent_options, &sink, registry.get());
//   ingest.SetResumeStates(restored.ingest, index);  // after a checkpoint restore
//   checkpointer.SetIngest(&ingest);
//   KVINDEX_RETURN_IF_ERROR(ingest.Start());
//   ... ingest.Ready(), ingest.Sources() ...
//   ingest.Stop();
//
// Checkpoints (storage::IngestCheckpoint): Hold parks every source between
// two engine batches and waits until the log drained what they published, so
// the sources' states and the index are captured at one log position; a
// restart from that checkpoint continues each source from its engine
// sequence (the engine's replay buffer serves what came meanwhile) instead of
// clearing it and replaying from seq 0.
//
// With no --source (options.sources empty) it runs no pipeline: the router
// follows only the engines registered over HTTP (registered_engines.h).
//
// Thread safety: Start/Stop/SetResumeStates from one controlling thread
// (idempotent); Ready/Sources from any thread; Hold/Save/Release from the
// checkpointer (Save on the apply thread while held).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/index/index_interface.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/router_api.h"
#include "storage/checkpointer.h"

namespace kvindex::router {

class EmbeddedIngest final : public storage::IngestCheckpoint {
 public:
  // `sink` must outlive this object; `registry` is nullable (no agent metrics).
  EmbeddedIngest(ingest::AgentOptions options, InProcessSink* sink, prometheus::Registry* registry);
  ~EmbeddedIngest() override;

  // Before Start: continue the sources from a restored checkpoint's states,
  // unless `index` (the restored index) holds blocks for a source that its
  // state does not (then every source starts afresh: fail closed); the
  // `registered` workers (POST /register, started cleared) are not checked.
  void SetResumeStates(std::vector<storage::CheckpointIngestSource> states,
                       const index::IndexInterface* index,
                       std::vector<std::string> registered = {});
  Status Start();
  void Stop();
  bool Ready() const;
  std::vector<IngestSourceStatus> Sources() const;
  // Sources that continued from a checkpoint at the last Start.
  size_t resumed_sources() const;

  bool Hold() override;
  std::vector<storage::CheckpointIngestSource> Save() override;
  void Release() override;

  // How long Hold waits for every source to reach a batch boundary (a
  // source inside a slow replay may not). Default: 5 s.
  static constexpr std::chrono::milliseconds kHoldTimeout{5000};

 private:
  ingest::AgentPipeline& Pipeline();

  ingest::AgentOptions options_;
  InProcessSink* const sink_;
  prometheus::Registry* const registry_;
  std::unique_ptr<ingest::AgentPipeline> pipeline_;
  bool running_ = false;

  Mutex hold_mu_;
  int holds_ ABSL_GUARDED_BY(hold_mu_) = 0;
  bool held_ ABSL_GUARDED_BY(hold_mu_) = false;  // the sources are parked
};

}  // namespace kvindex::router
