// EmbeddedIngest: the agent pipeline running inside kvindex-router
// (--embedded): engines' ZMQ streams -> normalization -> InProcessSink, which
// the router's ApplyLoop drains. No NATS; one process, one node.
//
//   InProcessSink sink;
//   EmbeddedIngest ingest(agent_options, &sink, registry.get());
//   KVINDEX_RETURN_IF_ERROR(ingest.Start());
//   ... ingest.Ready(), ingest.Sources() ...
//   ingest.Stop();
//
// Thread safety: Start/Stop from one controlling thread (idempotent);
// Ready/Sources from any thread.
#pragma once

#include <memory>
#include <vector>

#include "shared/base/status.h"
#include "shared/ingest/agent_pipeline.h"
#include "shared/publish/in_process_sink.h"
#include "shared/query/router_api.h"

namespace kvindex::router {

class EmbeddedIngest {
 public:
  // `sink` must outlive this object; `registry` is nullable (no agent metrics).
  EmbeddedIngest(ingest::AgentOptions options, InProcessSink* sink, prometheus::Registry* registry);
  ~EmbeddedIngest();

  Status Start();
  void Stop();
  bool Ready() const;
  std::vector<IngestSourceStatus> Sources() const;

 private:
  ingest::AgentOptions options_;
  InProcessSink* const sink_;
  prometheus::Registry* const registry_;
  std::unique_ptr<ingest::AgentPipeline> pipeline_;
  bool running_ = false;
};

}  // namespace kvindex::router
