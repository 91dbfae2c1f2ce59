// SourceTable: one model's source-id registry. Sources are interned into
// compact ids, 64 per holder group and at most max_sources (kMaxSources); a
// new source takes the lowest free id, so which id a source gets depends only
// on which ids are held, never on the order ids were freed in. ModelIndex
// holds an id exactly while its source holds an entry (model_index.h), so the
// ids in use are a function of the index's entries. Readers map an id to its record and to its rank
// (the position of its SourceKey among all the model's sources, so a query
// orders its rows without comparing strings) with no lock. The id tables are
// committed as ids are handed out (a model costs what it holds).
//
// Thread safety: Find/Add/Rank/Release/Destroy/ForEach from the model's
// single writer; record/rank/limit from any thread inside the model's grace
// period. Add publishes a record before its id can appear in a node; the
// writer calls Rank and Release inside its seqlock bracket (readers retry
// across it) and Destroy only after a grace period.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "shared/index/internal/chain_node.h"
#include "shared/index/internal/growing_mapping.h"
#include "shared/index/internal/memory.h"
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

class SourceTable {
 public:
  // max_sources: at most kMaxSources (tests lower it).
  SourceTable(MemoryCounter* memory, uint32_t max_sources);
  ~SourceTable();
  SourceTable(const SourceTable&) = delete;
  SourceTable& operator=(const SourceTable&) = delete;

  // Writer.
  SourceRecord* Find(const SourceKey& source) const;
  // The lowest free id for `source` (not held), its record published;
  // nullptr when max_sources ids are in use (or the tables cannot grow). The
  // caller ranks it.
  SourceRecord* Add(const SourceKey& source, std::string digest_prefix);
  // Ranks are every source's position in SourceKey order: Rank(id) places
  // a new id among them (O(sources), no sort, no allocation); Release
  // closes its gap.
  void Rank(uint32_t id);
  // Unpublishes `id` and frees it for reuse; its record goes to Destroy
  // after a grace period.
  SourceRecord* Release(uint32_t id);
  void Destroy(SourceRecord* rec);
  // Ids in use.
  uint32_t size() const { return static_cast<uint32_t>(ids_.size()); }
  template <typename Fn>
  void ForEach(const Fn& fn) const {
    for (const auto& [key, id] : ids_) fn(key, id);
  }

  // Any thread (ids below limit()).
  SourceRecord* record(uint32_t id, std::memory_order order) const {
    return records_[id].load(order);
  }
  uint32_t rank(uint32_t id) const { return ranks_[id].load(std::memory_order_relaxed); }
  // Ids ever handed out (max id + 1).
  uint32_t limit() const { return id_limit_.load(std::memory_order_acquire); }

 private:
  using IdMap =
      absl::flat_hash_map<SourceKey, uint32_t, absl::Hash<SourceKey>, std::equal_to<SourceKey>,
                          CountingAllocator<std::pair<const SourceKey, uint32_t>>>;

  MemoryCounter* memory_;
  const uint32_t max_sources_;
  IdMap ids_;
  uint64_t used_[kMaxSources / 64] = {};  // bit per id in use
  GrowingArray<std::atomic<SourceRecord*>> records_;
  GrowingArray<std::atomic<uint32_t>> ranks_;
  std::atomic<uint32_t> id_limit_{0};
  bool no_room_ = false;  // the id tables could not be reserved
};

}  // namespace kvindex::index::internal
