#include "shared/index/kv_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

namespace {

// `m` null: the model could not even be created.
Status Exhausted(std::string_view model, const ModelIndex* m, const ApplyResult& result) {
  std::string limit = "its first block locator could not be mapped";
  if (m != nullptr) {
    limit = m->limits().max_bytes != 0
                ? absl::StrCat("max_model_bytes ", m->limits().max_bytes)
                : absl::StrCat("hard limit of ", m->limits().max_chunks, " node arena chunks");
    absl::StrAppend(&limit, ", arena + locator ", m->limited_bytes(), " bytes");
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("index memory of model '", std::string(model), "' exhausted (", limit,
                   "): ", result.blocks_not_indexed, " stored blocks not indexed, ",
                   result.sources_cleared, " sources cleared (a removal could not split a node)"));
}

}  // namespace

KvIndex::KvIndex() : KvIndex(KvIndexOptions{}) {}

KvIndex::KvIndex(const KvIndexOptions& options)
    : options_(options), memory_(std::make_unique<internal::MemoryCounter>()) {
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
  internal::ModelLimits limits;
  limits.max_bytes = options_.max_model_bytes;
  limits.max_chunks = options_.max_arena_chunks;
  std::unique_ptr<ModelIndex> created =
      ModelIndex::Create(std::string(model), memory_.get(), limits);
  if (created == nullptr) return nullptr;
  owned_models_.push_back(std::move(created));
  auto list = std::make_unique<ModelList>(*models_.load(std::memory_order_relaxed));
  list->models.push_back(owned_models_.back().get());
  std::sort(list->models.begin(), list->models.end(),
            [](const ModelIndex* a, const ModelIndex* b) { return a->model() < b->model(); });
  models_.store(list.get(), std::memory_order_release);
  model_lists_.push_back(std::move(list));
  return owned_models_.back().get();
}

ApplyResult KvIndex::ApplyMessage(std::span<const PlacementEvent> events, uint64_t log_position) {
  FlushRestore();
  ApplyResult result;
  if (log_position <= applied_seq_.load(std::memory_order_relaxed)) return result;
  result.applied = true;
  std::string_view exhausted;
  for (const PlacementEvent& event : events) ApplyEvent(event, &result, &exhausted);
  // A partly indexed message is still consumed: replicas applying the same
  // log leave out the same blocks, so they stay identical.
  applied_seq_.store(log_position, std::memory_order_release);
  if (result.blocks_not_indexed != 0 || result.sources_cleared != 0) {
    result.status = Exhausted(exhausted, FindModel(exhausted), result);
  }
  return result;
}

size_t KvIndex::StoreBlocks(std::string_view model, const SourceKey& source, Tier tier,
                            std::span<const uint64_t> hashes, uint32_t block_size) {
  ModelIndex* m = GetOrCreateModel(model);
  size_t left_out = hashes.size();
  if (m != nullptr) {
    m->SetBlockSize(block_size);
    left_out = m->Store(source, tier, hashes);
  }
  if (left_out != 0) blocks_not_indexed_.fetch_add(left_out, std::memory_order_relaxed);
  return left_out;
}

void KvIndex::ApplyEvent(const PlacementEvent& event, ApplyResult* result,
                         std::string_view* exhausted) {
  switch (event.kind) {
    case PlacementKind::kStored: {
      const size_t left_out =
          StoreBlocks(event.model, event.source, event.tier, event.block_hashes, event.block_size);
      if (left_out != 0) {
        result->blocks_not_indexed += left_out;
        if (exhausted->empty()) *exhausted = event.model;
      }
      break;
    }
    case PlacementKind::kRemoved:
      if (const ModelIndex* m = FindModel(event.model)) {
        if (!const_cast<ModelIndex*>(m)->Remove(event.source, event.tier, event.block_hashes)) {
          sources_cleared_on_exhaustion_.fetch_add(1, std::memory_order_relaxed);
          ++result->sources_cleared;
          if (exhausted->empty()) *exhausted = event.model;
        }
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
  stats.blocks_not_indexed = blocks_not_indexed_.load(std::memory_order_relaxed);
  stats.sources_cleared_on_exhaustion =
      sources_cleared_on_exhaustion_.load(std::memory_order_relaxed);
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
  StoreBlocks(p.model, p.source, p.tier, p.hashes, p.block_size);
  p.hashes.clear();
}

void KvIndex::RestoreRun(std::string_view model, const SourceKey& source, Tier tier,
                         std::span<const uint64_t> hashes, uint32_t block_size) {
  FlushRestore();
  StoreBlocks(model, source, tier, hashes, block_size);
}

void KvIndex::ReserveBlocks(std::string_view model, uint64_t blocks) {
  if (ModelIndex* m = GetOrCreateModel(model)) m->Reserve(blocks);
}

void KvIndex::FailNodeAllocationsForTesting(std::string_view model, uint32_t skip, uint32_t n) {
  const_cast<ModelIndex*>(FindModel(model))->FailNodeAllocationsForTesting(skip, n);
}

std::optional<LocatorProfile> KvIndex::ProfileLocator(std::string_view model,
                                                      bool histograms) const {
  const ModelIndex* m = FindModel(model);
  if (m == nullptr) return std::nullopt;
  LocatorProfile out;
  m->ProfileLocator(histograms, &out);
  return out;
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
