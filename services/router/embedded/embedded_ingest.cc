#include "services/router/embedded/embedded_ingest.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

namespace kvindex::router {

EmbeddedIngest::EmbeddedIngest(ingest::AgentOptions options, InProcessSink* sink,
                               prometheus::Registry* registry)
    : options_(std::move(options)), sink_(sink), registry_(registry) {}

EmbeddedIngest::~EmbeddedIngest() { Stop(); }

ingest::AgentPipeline& EmbeddedIngest::Pipeline() {
  // The pipeline registers its metrics on construction; keep one instance
  // across Stop/Start so the registry never sees the families twice.
  if (pipeline_ == nullptr) {
    pipeline_ = std::make_unique<ingest::AgentPipeline>(options_, sink_, registry_);
  }
  return *pipeline_;
}

void EmbeddedIngest::SetResumeStates(std::vector<storage::CheckpointIngestSource> states,
                                     const index::IndexInterface* index,
                                     std::vector<std::string> registered) {
  if (options_.sources.empty()) return;  // only registered engines (they start cleared)
  std::vector<ingest::SavedSource> saved;
  saved.reserve(states.size());
  for (storage::CheckpointIngestSource& s : states) {
    saved.push_back({std::move(s.key), std::move(s.state)});
  }
  // The index may hold less than the states say (a model left out by
  // --models, a memory cap), never more: a block the state does not know
  // would never be removed.
  // Registered engines' sources (POST /register) are not --source ones: they
  // start cleared, whatever the index holds of them.
  auto consistent = [index, registered = std::move(registered)](
                        const std::vector<ingest::HeldBlocks>& held) {
    std::map<std::tuple<std::string, SourceKey, int>, uint64_t> said;
    for (const ingest::HeldBlocks& h : held) {
      said[{h.model, h.source, static_cast<int>(h.tier)}] += h.blocks;
    }
    for (const index::SourceInfo& info : index->Sources()) {
      if (std::find(registered.begin(), registered.end(), info.source.worker) != registered.end()) {
        continue;
      }
      for (int t = 0; t < kNumTiers; ++t) {
        if (info.entries[t] == 0) continue;
        auto it = said.find({info.model, info.source, t});
        if (it == said.end() || it->second < info.entries[t]) return false;
      }
    }
    return true;
  };
  Pipeline().SetResumeStates(std::move(saved), consistent);
}

Status EmbeddedIngest::Start() {
  if (running_) return absl::OkStatus();
  if (options_.sources.empty()) {
    // No --source: only engines registered over HTTP (RegisteredEngines).
    running_ = true;
    return absl::OkStatus();
  }
  KVINDEX_RETURN_IF_ERROR(options_.Validate());
  KVINDEX_RETURN_IF_ERROR(Pipeline().Start());
  running_ = true;
  return absl::OkStatus();
}

void EmbeddedIngest::Stop() {
  if (!running_) return;
  if (pipeline_ != nullptr) pipeline_->Stop();
  running_ = false;
}

bool EmbeddedIngest::Ready() const {
  return running_ && (pipeline_ == nullptr || pipeline_->Ready());
}

std::vector<IngestSourceStatus> EmbeddedIngest::Sources() const {
  if (pipeline_ == nullptr) return {};
  return pipeline_->Sources();
}

size_t EmbeddedIngest::resumed_sources() const {
  return pipeline_ == nullptr ? 0 : pipeline_->resumed_sources();
}

bool EmbeddedIngest::Hold() {
  MutexLock lock(&hold_mu_);
  if (holds_++ > 0) return held_;
  held_ = running_ && (pipeline_ == nullptr || pipeline_->PauseSources(kHoldTimeout));
  // Parked sources publish nothing more: once the log drained what they
  // published, the apply thread's next task sees it applied.
  if (held_ && !sink_->Flush().ok()) {
    if (pipeline_ != nullptr) pipeline_->ResumeSources();
    held_ = false;
  }
  return held_;
}

std::vector<storage::CheckpointIngestSource> EmbeddedIngest::Save() {
  std::vector<storage::CheckpointIngestSource> out;
  if (pipeline_ == nullptr) return out;
  for (ingest::SavedSource& s : pipeline_->SaveSources()) {
    out.push_back({std::move(s.key), std::move(s.state)});
  }
  return out;
}

void EmbeddedIngest::Release() {
  MutexLock lock(&hold_mu_);
  if (--holds_ > 0) return;
  if (held_ && pipeline_ != nullptr) pipeline_->ResumeSources();
  held_ = false;
}

}  // namespace kvindex::router
