// ModelIndex: the tiered index of one model (semantics.md sections 4-6).
//
// Holds every (source, tier, canonical hash) entry of one model in a
// BlockTable (block_table.h), interns sources into compact ids (56 per holder
// group), and keeps entry counts and the digest incrementally. KvIndex
// (kv_index.h) routes events and queries to one ModelIndex per model.
//
// Thread safety: Store/Remove/Clear*/ForEachEntry/SetBlockSize from the single
// writer thread; Match/AddStats/AppendSources/block_size from any thread.
//
// Invariants:
// - A slot's holder bitmap is never 0 while the slot is occupied.
// - Every operation that can make a reader overcount runs inside a bracket:
//   clearing a holder bit or moving a slot marks its line in versions_ first;
//   swapping the table or freeing a source id bumps the global seqlock_.
//   Insertions are not bracketed.
// - A table or source record unreachable from the index is freed only after a
//   grace period (no reader can still hold it).
// - entries_, per-source counts and digest_ equal the values computed from the
//   table at every point between two writer calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "shared/index/index_types.h"
#include "shared/index/internal/block_table.h"
#include "shared/index/internal/memory.h"
#include "shared/index/internal/read_sync.h"
#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::index::internal {

struct SourceRecord {
  SourceKey key;
  std::string digest_prefix;  // see entry_digest.h
  uint32_t id = 0;
  std::atomic<uint64_t> entries[kNumTiers] = {};
  uint64_t total = 0;  // writer only
};

class ModelIndex {
 public:
  ModelIndex(std::string model, MemoryCounter* memory);
  ~ModelIndex();
  ModelIndex(const ModelIndex&) = delete;
  ModelIndex& operator=(const ModelIndex&) = delete;

  const std::string& model() const { return model_; }
  uint32_t block_size() const { return block_size_.load(std::memory_order_acquire); }

  // Writer. Set semantics: inserting a held entry or removing a missing one
  // changes nothing. A source beyond kMaxSources is not indexed (fail closed).
  void SetBlockSize(uint32_t block_size);
  void Store(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes);
  void Remove(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes);
  void ClearSource(const SourceKey& source);
  void ClearWorker(std::string_view worker);
  void ForEachEntry(const std::function<void(const SourceKey&, Tier, uint64_t)>& fn) const;

  // Any thread. Appends one row per source with longest > 0 (unsorted).
  void Match(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out) const;
  void AddStats(IndexStats* stats) const;
  void AppendSources(std::vector<SourceInfo>* out) const;

 private:
  SourceRecord* FindSource(const SourceKey& source) const;
  SourceRecord* FindOrAddSource(const SourceKey& source);
  // `log` null = removals are excluded (fallback mutex held).
  void MatchOnce(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out, ReadLog* log) const;
  template <uint32_t G>
  void MatchFewGroups(const BlockTable* table, std::span<const uint64_t> seq, int num_planes,
                      std::vector<WorkerMatch>* out, ReadLog* log) const;
  void CountDelta(SourceRecord* rec, Tier tier, int64_t delta);
  // Replaces the table by a copy of `capacity` slots without the holders in
  // `drop` (one mask per group, may be null); frees `retire_ids` inside the
  // same seqlock bracket.
  void Rebuild(size_t capacity, const uint64_t* drop, const std::vector<uint32_t>& retire_ids);
  void ClearIds(const std::vector<uint32_t>& ids);

  const std::string model_;
  MemoryCounter* memory_;
  std::atomic<uint32_t> block_size_{0};

  std::atomic<BlockTable*> table_;
  RemovalSeqlock seqlock_;
  LineVersions versions_;
  GracePeriod grace_;

  // Source ids: writer-side lookup plus a reader-visible id -> record array.
  using IdMap =
      absl::flat_hash_map<SourceKey, uint32_t, absl::Hash<SourceKey>, std::equal_to<SourceKey>,
                          CountingAllocator<std::pair<const SourceKey, uint32_t>>>;
  IdMap ids_;
  std::vector<uint32_t, CountingAllocator<uint32_t>> free_ids_;
  std::unique_ptr<std::atomic<SourceRecord*>[]> records_;
  std::atomic<uint32_t> id_limit_{0};  // ids ever handed out (max id + 1)

  std::atomic<uint64_t> entries_[kNumTiers] = {};
  std::atomic<uint64_t> digest_{0};
  std::atomic<uint64_t> sources_with_entries_{0};
};

}  // namespace kvindex::index::internal
