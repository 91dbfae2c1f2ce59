#include "shared/index/kv_index.h"

#include <algorithm>

#include "shared/index/internal/memory.h"
#include "shared/index/internal/model_index.h"

namespace kvindex::index {
namespace internal {

struct ModelList {
  std::vector<ModelIndex*> models;  // sorted by name
};

}  // namespace internal

using internal::ModelIndex;
using internal::ModelList;

KvIndex::KvIndex() : memory_(std::make_unique<internal::MemoryCounter>()) {
  model_lists_.push_back(std::make_unique<ModelList>());
  models_.store(model_lists_.back().get(), std::memory_order_release);
}

KvIndex::~KvIndex() = default;

const ModelIndex* KvIndex::FindModel(std::string_view model) const {
  const ModelList* list = models_.load(std::memory_order_acquire);
  for (const ModelIndex* m : list->models) {
    if (m->model() == model) return m;
  }
  return nullptr;
}

ModelIndex* KvIndex::GetOrCreateModel(std::string_view model) {
  if (const ModelIndex* found = FindModel(model)) return const_cast<ModelIndex*>(found);
  owned_models_.push_back(std::make_unique<ModelIndex>(std::string(model), memory_.get()));
  auto list = std::make_unique<ModelList>(*models_.load(std::memory_order_relaxed));
  list->models.push_back(owned_models_.back().get());
  std::sort(list->models.begin(), list->models.end(),
            [](const ModelIndex* a, const ModelIndex* b) { return a->model() < b->model(); });
  models_.store(list.get(), std::memory_order_release);
  model_lists_.push_back(std::move(list));
  return owned_models_.back().get();
}

bool KvIndex::ApplyMessage(std::span<const PlacementEvent> events, uint64_t log_position) {
  FlushRestore();
  if (log_position <= applied_seq_.load(std::memory_order_relaxed)) return false;
  for (const PlacementEvent& event : events) ApplyEvent(event);
  applied_seq_.store(log_position, std::memory_order_release);
  return true;
}

void KvIndex::ApplyEvent(const PlacementEvent& event) {
  switch (event.kind) {
    case PlacementKind::kStored: {
      ModelIndex* m = GetOrCreateModel(event.model);
      m->SetBlockSize(event.block_size);
      m->Store(event.source, event.tier, event.block_hashes);
      break;
    }
    case PlacementKind::kRemoved:
      if (const ModelIndex* m = FindModel(event.model)) {
        const_cast<ModelIndex*>(m)->Remove(event.source, event.tier, event.block_hashes);
      }
      break;
    case PlacementKind::kCleared:
      for (ModelIndex* m : models_.load(std::memory_order_relaxed)->models) {
        if (event.model.empty() || m->model() == event.model) m->ClearSource(event.source);
      }
      break;
    case PlacementKind::kWorkerExpired:
      for (ModelIndex* m : models_.load(std::memory_order_relaxed)->models) {
        m->ClearWorker(event.source.worker);
      }
      break;
    case PlacementKind::kHeartbeat:
    case PlacementKind::kAgentExpired:
      break;
  }
}

StatusOr<MatchResult> KvIndex::MatchSequenceHashes(std::string_view model,
                                                   std::span<const uint64_t> seq_hashes,
                                                   const MatchOptions& options) const {
  const ModelIndex* m = FindModel(model);
  if (m == nullptr) return absl::NotFoundError("unknown model '" + std::string(model) + "'");
  MatchResult result;
  result.blocks = static_cast<uint32_t>(seq_hashes.size());
  result.applied_seq = applied_seq_.load(std::memory_order_acquire);
  if (options.max_blocks != 0 && options.max_blocks < seq_hashes.size()) {
    seq_hashes = seq_hashes.first(options.max_blocks);
  }
  m->Match(seq_hashes, &result.workers);  // already in SortWorkerMatches order
  return result;
}

std::optional<uint32_t> KvIndex::BlockSize(std::string_view model) const {
  const ModelIndex* m = FindModel(model);
  if (m == nullptr) return std::nullopt;
  return m->block_size();
}

std::vector<std::string> KvIndex::Models() const {
  std::vector<std::string> names;
  for (const ModelIndex* m : models_.load(std::memory_order_acquire)->models) {
    names.push_back(m->model());
  }
  return names;
}

IndexStats KvIndex::Stats() const {
  IndexStats stats;
  stats.applied_seq = applied_seq_.load(std::memory_order_acquire);
  for (const ModelIndex* m : models_.load(std::memory_order_acquire)->models) m->AddStats(&stats);
  stats.bytes_allocated = memory_->bytes();
  return stats;
}

std::vector<SourceInfo> KvIndex::Sources() const {
  std::vector<SourceInfo> out;
  for (const ModelIndex* m : models_.load(std::memory_order_acquire)->models) {
    const size_t first = out.size();
    m->AppendSources(&out);
    std::sort(out.begin() + first, out.end(),
              [](const SourceInfo& a, const SourceInfo& b) { return a.source < b.source; });
  }
  return out;
}

void KvIndex::ForEachEntry(const EntryVisitor& fn) const {
  for (const ModelIndex* m : models_.load(std::memory_order_acquire)->models) {
    m->ForEachEntry([&](const SourceKey& source, Tier tier, uint64_t hash) {
      fn(m->model(), source, tier, hash);
    });
  }
}

void KvIndex::RestoreEntry(std::string_view model, const SourceKey& source, Tier tier,
                           uint64_t seq_hash, uint32_t block_size) {
  PendingRestore& p = restore_;
  if (!p.hashes.empty() && (p.model != model || p.source != source || p.tier != tier ||
                            p.block_size != block_size || p.hashes.size() >= 4096)) {
    FlushRestore();
  }
  if (p.hashes.empty()) {
    p.model = model;
    p.source = source;
    p.tier = tier;
    p.block_size = block_size;
  }
  p.hashes.push_back(seq_hash);
}

void KvIndex::FlushRestore() {
  PendingRestore& p = restore_;
  if (p.hashes.empty()) return;
  ModelIndex* m = GetOrCreateModel(p.model);
  m->SetBlockSize(p.block_size);
  m->Store(p.source, p.tier, p.hashes);
  p.hashes.clear();
}

void KvIndex::RestoreRun(std::string_view model, const SourceKey& source, Tier tier,
                         std::span<const uint64_t> hashes, uint32_t block_size) {
  FlushRestore();
  ModelIndex* m = GetOrCreateModel(model);
  m->SetBlockSize(block_size);
  m->Store(source, tier, hashes);
}

void KvIndex::ReserveBlocks(std::string_view model, uint64_t blocks) {
  GetOrCreateModel(model)->Reserve(blocks);
}

uint64_t KvIndex::DistinctBlocks(std::string_view model) const {
  const ModelIndex* m = FindModel(model);
  return m == nullptr ? 0 : m->blocks();
}

void KvIndex::RestoreAppliedSeq(uint64_t log_position) {
  FlushRestore();
  applied_seq_.store(log_position, std::memory_order_release);
}

}  // namespace kvindex::index
