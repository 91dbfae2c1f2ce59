#include "services/router/embedded/embedded_ingest.h"

#include <utility>

namespace kvindex::router {

EmbeddedIngest::EmbeddedIngest(ingest::AgentOptions options, InProcessSink* sink,
                               prometheus::Registry* registry)
    : options_(std::move(options)), sink_(sink), registry_(registry) {}

EmbeddedIngest::~EmbeddedIngest() { Stop(); }

Status EmbeddedIngest::Start() {
  if (running_) return absl::OkStatus();
  KVINDEX_RETURN_IF_ERROR(options_.Validate());
  // The pipeline registers its metrics on construction; keep one instance
  // across Stop/Start so the registry never sees the families twice.
  if (pipeline_ == nullptr) {
    pipeline_ = std::make_unique<ingest::AgentPipeline>(options_, sink_, registry_);
  }
  KVINDEX_RETURN_IF_ERROR(pipeline_->Start());
  running_ = true;
  return absl::OkStatus();
}

void EmbeddedIngest::Stop() {
  if (!running_) return;
  pipeline_->Stop();
  running_ = false;
}

bool EmbeddedIngest::Ready() const { return running_ && pipeline_->Ready(); }

std::vector<IngestSourceStatus> EmbeddedIngest::Sources() const {
  if (pipeline_ == nullptr) return {};
  return pipeline_->Sources();
}

}  // namespace kvindex::router
