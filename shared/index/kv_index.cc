#include "shared/index/kv_index.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "shared/index/internal/memory.h"
#include "shared/index/internal/model_index.h"

namespace kvindex::index {
namespace internal {

// Append-only: readers load the list, then `size` (acquire), then the slots
// below it. A full list is copied into one of twice the capacity; old lists
// stay until destruction (together less than the newest), so readers need no
// lock and no grace period.
struct ModelList {
  explicit ModelList(size_t cap) : capacity(cap), slots(new std::atomic<ModelIndex*>[cap]) {}
  const size_t capacity;
  std::atomic<size_t> size{0};
  std::unique_ptr<std::atomic<ModelIndex*>[]> slots;

  std::span<std::atomic<ModelIndex*>> Live() const {
    return {slots.get(), size.load(std::memory_order_acquire)};
  }
};

}  // namespace internal

using internal::ModelIndex;
using internal::ModelList;

namespace {

constexpr size_t kInitialModelSlots = 8;

bool IsClear(const PlacementEvent& event) {
  return event.kind == PlacementKind::kCleared || event.kind == PlacementKind::kWorkerExpired;
}

// A model name in a message: hostile, so bounded.
std::string Quoted(std::string_view model) {
  constexpr size_t kMax = 64;
  return absl::StrCat("'", std::string(model.substr(0, kMax)), model.size() > kMax ? "...'" : "'");
}

Status Refused(std::string_view model, const ModelIndex* m, const ApplyResult& result,
               uint32_t max_models) {
  std::string what;
  if (result.blocks_not_indexed != 0 || result.sources_cleared != 0) {
    // `m` null: the model could not even be created.
    std::string limit = "its first block locator could not be mapped";
    if (m != nullptr) {
      limit = m->limits().max_bytes != 0
                  ? absl::StrCat("max_model_bytes ", m->limits().max_bytes)
                  : absl::StrCat("hard limit of ", m->limits().max_chunks, " node arena chunks");
      absl::StrAppend(&limit, ", arena + locator ", m->limited_bytes(), " bytes");
    }
    what =
        absl::StrCat("index memory of model ", Quoted(model), " exhausted (", limit,
                     "): ", result.blocks_not_indexed, " stored blocks not indexed, ",
                     result.sources_cleared, " sources cleared (a removal could not split a node)");
  }
  if (result.events_over_source_limit != 0) {
    absl::StrAppend(&what, what.empty() ? "" : "; ", "source limit (", internal::kMaxSources,
                    " per model) of model ", Quoted(model),
                    " reached: ", result.events_over_source_limit, " stored events not indexed");
  }
  if (result.events_over_model_limit != 0) {
    absl::StrAppend(&what, what.empty() ? "" : "; ", "model limit (max_models ", max_models,
                    ") reached: ", result.events_over_model_limit,
                    " stored events of models not indexed");
  }
  return absl::ResourceExhaustedError(what);
}

}  // namespace

KvIndex::KvIndex() : KvIndex(KvIndexOptions{}) {}

KvIndex::KvIndex(const KvIndexOptions& options)
    : options_(options), memory_(std::make_unique<internal::MemoryCounter>()) {
  model_lists_.push_back(std::make_unique<ModelList>(0));
  models_.store(model_lists_.back().get(), std::memory_order_release);
}

KvIndex::~KvIndex() {
  for (const auto& list : model_lists_) {
    memory_->Sub(list->capacity * sizeof(ModelIndex*));
  }
}

const ModelIndex* KvIndex::FindModel(std::string_view model) const {
  for (const auto& slot : models_.load(std::memory_order_acquire)->Live()) {
    const ModelIndex* m = slot.load(std::memory_order_relaxed);
    if (m->model() == model) return m;
  }
  return nullptr;
}

std::vector<const ModelIndex*> KvIndex::SortedModels() const {
  std::vector<const ModelIndex*> out;
  for (const auto& slot : models_.load(std::memory_order_acquire)->Live()) {
    out.push_back(slot.load(std::memory_order_relaxed));
  }
  std::sort(out.begin(), out.end(),
            [](const ModelIndex* a, const ModelIndex* b) { return a->model() < b->model(); });
  return out;
}

ModelIndex* KvIndex::GetOrCreateModel(std::string_view model, bool* over_limit) {
  if (const ModelIndex* found = FindModel(model)) return const_cast<ModelIndex*>(found);
  if (options_.max_models != 0 && owned_models_.size() >= options_.max_models) {
    // In log order, so every replica refuses the same models.
    events_over_model_limit_.fetch_add(1, std::memory_order_relaxed);
    if (over_limit != nullptr) *over_limit = true;
    return nullptr;
  }
  internal::ModelLimits limits;
  limits.max_bytes = options_.max_model_bytes;
  limits.max_chunks = options_.max_arena_chunks;
  limits.max_sources = options_.max_sources_per_model;
  std::unique_ptr<ModelIndex> created =
      ModelIndex::Create(std::string(model), memory_.get(), limits);
  if (created == nullptr) return nullptr;
  created->set_clear_observer(clear_observer_);
  created->set_departure_observer(departure_observer_);
  ModelList* list = model_lists_.back().get();
  const size_t n = list->size.load(std::memory_order_relaxed);
  if (n == list->capacity) {
    auto grown = std::make_unique<ModelList>(std::max(kInitialModelSlots, 2 * n));
    memory_->Add(grown->capacity * sizeof(ModelIndex*));
    for (size_t i = 0; i < n; ++i) {
      grown->slots[i].store(list->slots[i].load(std::memory_order_relaxed),
                            std::memory_order_relaxed);
    }
    grown->size.store(n, std::memory_order_relaxed);
    list = grown.get();
    model_lists_.push_back(std::move(grown));
    models_.store(list, std::memory_order_release);
  }
  owned_models_.push_back(std::move(created));
  list->slots[n].store(owned_models_.back().get(), std::memory_order_relaxed);
  list->size.store(n + 1, std::memory_order_release);
  return owned_models_.back().get();
}

ApplyResult KvIndex::ApplyMessage(std::span<const PlacementEvent> events, uint64_t log_position) {
  FlushRestore();
  ApplyResult result;
  if (log_position <= applied_seq_.load(std::memory_order_relaxed)) return result;
  result.applied = true;
  std::string_view exhausted;
  for (size_t i = 0; i < events.size();) {
    if (!IsClear(events[i])) {
      ApplyEvent(events[i++], &result, &exhausted);
      continue;
    }
    // A run of clears (an agent's gap or expiry: one per source) is one
    // pass over each model's nodes; clears commute, stores between runs do
    // not.
    size_t end = i + 1;
    while (end < events.size() && IsClear(events[end])) ++end;
    for (const auto& slot : models_.load(std::memory_order_relaxed)->Live()) {
      slot.load(std::memory_order_relaxed)->Clear(events.subspan(i, end - i));
    }
    i = end;
  }
  // A partly indexed message is still consumed: replicas applying the same
  // log leave out the same blocks, so they stay identical.
  applied_seq_.store(log_position, std::memory_order_release);
  if (result.blocks_not_indexed != 0 || result.sources_cleared != 0 ||
      result.events_over_model_limit != 0 || result.events_over_source_limit != 0) {
    result.status = Refused(exhausted, FindModel(exhausted), result, options_.max_models);
  }
  return result;
}

KvIndex::StoreOutcome KvIndex::StoreBlocks(std::string_view model, const SourceKey& source,
                                           Tier tier, std::span<const uint64_t> hashes,
                                           uint32_t block_size) {
  StoreOutcome out;
  ModelIndex* m = GetOrCreateModel(model, &out.over_model_limit);
  // Over a limit of models or sources: counted as an event, not as blocks of
  // a model short of memory.
  if (out.over_model_limit) return out;
  out.not_indexed = hashes.size();
  if (m != nullptr) {
    m->SetBlockSize(block_size);
    out.not_indexed = m->Store(source, tier, hashes, &out.over_source_limit);
  }
  if (out.not_indexed != 0)
    blocks_not_indexed_.fetch_add(out.not_indexed, std::memory_order_relaxed);
  return out;
}

void KvIndex::ApplyEvent(const PlacementEvent& event, ApplyResult* result,
                         std::string_view* exhausted) {
  switch (event.kind) {
    case PlacementKind::kStored: {
      const StoreOutcome out =
          StoreBlocks(event.model, event.source, event.tier, event.block_hashes, event.block_size);
      if (out.over_model_limit) ++result->events_over_model_limit;
      if (out.over_source_limit) ++result->events_over_source_limit;
      if (departure_observer_ != nullptr) {
        const std::span<const uint64_t> hashes(event.block_hashes);
        if (out.over_model_limit || out.over_source_limit) {
          departure_observer_->OnNotIndexed(event.model, hashes);
        } else if (out.not_indexed != 0) {  // always the event's tail
          departure_observer_->OnNotIndexed(event.model, hashes.last(out.not_indexed));
        }
      }
      if (out.not_indexed != 0 || out.over_source_limit) {
        result->blocks_not_indexed += out.not_indexed;
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
    case PlacementKind::kWorkerExpired:  // ApplyMessage clears runs of them
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
  for (const ModelIndex* m : SortedModels()) names.push_back(m->model());
  return names;
}

IndexStats KvIndex::Stats() const {
  IndexStats stats;
  stats.applied_seq = applied_seq_.load(std::memory_order_acquire);
  for (const auto& slot : models_.load(std::memory_order_acquire)->Live()) {
    slot.load(std::memory_order_relaxed)->AddStats(&stats);
  }
  stats.events_over_model_limit = events_over_model_limit_.load(std::memory_order_relaxed);
  stats.blocks_not_indexed = blocks_not_indexed_.load(std::memory_order_relaxed);
  stats.sources_cleared_on_exhaustion =
      sources_cleared_on_exhaustion_.load(std::memory_order_relaxed);
  stats.bytes_allocated = memory_->bytes();
  return stats;
}

std::vector<SourceInfo> KvIndex::Sources() const {
  std::vector<SourceInfo> out;
  for (const ModelIndex* m : SortedModels()) {
    const size_t first = out.size();
    m->AppendSources(&out);
    std::sort(out.begin() + first, out.end(),
              [](const SourceInfo& a, const SourceInfo& b) { return a.source < b.source; });
  }
  return out;
}

void KvIndex::ForEachEntry(const EntryVisitor& fn) const {
  for (const ModelIndex* m : SortedModels()) {
    m->ForEachEntry([&](const SourceKey& source, Tier tier, uint64_t hash) {
      fn(m->model(), source, tier, hash);
    });
  }
}

void KvIndex::ForEachRun(const RunVisitor& fn) const {
  for (const ModelIndex* m : SortedModels()) {
    m->ForEachRun([&](const SourceKey& source, Tier tier, std::span<const uint64_t> hashes) {
      fn(m->model(), source, tier, hashes);
    });
  }
}

namespace {

class KvIndexCapture final : public IndexCapture {
 public:
  KvIndexCapture(IndexStats stats, std::vector<Model> models,
                 std::vector<std::unique_ptr<internal::ModelCapture>> captures)
      : captures_(std::move(captures)) {
    stats_ = stats;
    models_ = std::move(models);
  }
  void ForEachRun(const RunVisitor& fn) override {
    for (uint32_t m = 0; m < captures_.size(); ++m) {
      captures_[m]->ForEachRun([&](uint32_t source, Tier tier, std::span<const uint64_t> hashes) {
        fn(m, source, tier, hashes);
      });
    }
  }

 private:
  std::vector<std::unique_ptr<internal::ModelCapture>> captures_;  // by models_
};

}  // namespace

StatusOr<std::unique_ptr<IndexCapture>> KvIndex::BeginCapture() const {
  std::vector<IndexCapture::Model> models;
  std::vector<std::unique_ptr<internal::ModelCapture>> captures;
  for (const ModelIndex* m : SortedModels()) {
    // The writer's own models (const only through this const method).
    std::vector<SourceKey> sources;
    std::unique_ptr<internal::ModelCapture> capture =
        const_cast<ModelIndex*>(m)->BeginCapture(&sources);
    if (capture == nullptr) {
      return absl::FailedPreconditionError("another capture of the index is still open");
    }
    captures.push_back(std::move(capture));
    models.push_back({m->model(), m->block_size(), m->blocks(), std::move(sources)});
  }
  return std::unique_ptr<IndexCapture>(
      std::make_unique<KvIndexCapture>(Stats(), std::move(models), std::move(captures)));
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
  if (ModelIndex* m = GetOrCreateModel(model, nullptr)) m->Reserve(blocks);
}

void KvIndex::SetClearObserverForTesting(ClearObserver* observer) {
  clear_observer_ = observer;
  for (const auto& slot : models_.load(std::memory_order_relaxed)->Live()) {
    slot.load(std::memory_order_relaxed)->set_clear_observer(observer);
  }
}

void KvIndex::set_departure_observer(DepartureObserver* observer) {
  departure_observer_ = observer;
  for (const auto& slot : models_.load(std::memory_order_relaxed)->Live()) {
    slot.load(std::memory_order_relaxed)->set_departure_observer(observer);
  }
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

size_t KvIndex::ModelSources(std::string_view model, std::vector<SourceKey>* out) const {
  const ModelIndex* m = FindModel(model);
  if (m == nullptr) return 0;
  if (out == nullptr) return m->sources_with_entries();
  std::vector<SourceInfo> sources;
  m->AppendSources(&sources);
  for (SourceInfo& info : sources) out->push_back(std::move(info.source));
  return sources.size();
}

void KvIndex::RestoreAppliedSeq(uint64_t log_position) {
  FlushRestore();
  applied_seq_.store(log_position, std::memory_order_release);
}

}  // namespace kvindex::index
