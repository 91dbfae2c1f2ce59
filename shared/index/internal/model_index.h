// ModelIndex: the tiered index of one model (semantics.md sections 4-6).
//
// Blocks live in ChainNodes (chain_node.h): runs of consecutive blocks of a
// chain with one holder set (which sources hold them, in which tier). A
// BlockLocator (block_locator.h) maps every block's sequence hash to its node
// and offset. A query probes the locator once per node it enters and matches
// the following blocks by comparing the node's contiguous hashes; the match
// state changes only at node boundaries (match_accumulator.h).
//
// The writer keeps every node's holder set uniform: an event that adds or
// removes a holder on part of a node first carves that part into a node of its
// own, copying whichever parts are smaller and relabelling their locator slots.
// Sources are interned into compact ids, 64 per holder group. Entry counts and
// the digest are kept incrementally. KvIndex (kv_index.h) routes events and
// queries to one ModelIndex per model.
//
// Memory limits (ModelLimits) fail closed, never by exception: a store stops
// at the first block that would need node or locator memory past the limit
// for new entries (the rest of the event is not indexed); a split is
// allocated completely before anything changes, so a removal that cannot
// split clears its source from the model instead (README.md, "Memory
// limits"). Every decision depends only on the events applied, so replicas
// applying the same log hold the same entries.
//
// Thread safety: Store/Remove/Clear*/ForEachEntry/SetBlockSize from the single
// writer thread; Match/AddStats/AppendSources/block_size from any thread.
//
// Invariants (between two writer calls):
// - Every live block is in exactly one node's [begin, end) and has exactly one
//   locator slot, which names that node and offset; every slot names a live block.
// - Every live node has at least one holder bit; a node without live blocks
//   is retired (freed with its id after a grace period).
// - Clearing a holder bit and shrinking a node happen inside the node's
//   version bracket, after the moved blocks were relabelled; setting a bit and
//   creating nodes are not bracketed.
// - entries_, per-source counts and digest_ equal the values computed from the
//   nodes.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/index/index_types.h"
#include "shared/index/internal/block_locator.h"
#include "shared/index/internal/chain_node.h"
#include "shared/index/internal/grace_period.h"
#include "shared/index/internal/memory.h"
#include "shared/index/internal/model_capture.h"
#include "shared/index/internal/node_arena.h"
#include "shared/index/internal/read_sync.h"
#include "shared/index/internal/source_table.h"
#include "shared/model/placement_event.h"
#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::index::internal {

struct ModelLimits {
  // Node arena + block locator bytes. New entries stop a reserve below it
  // (max(one chunk, 1/32 of it)), which is left to the splits of removals.
  // 0 = no cap.
  uint64_t max_bytes = 0;
  // The arena's hard limit (tests lower it); new entries stop max_chunks/64
  // chunks (at least one) below it.
  uint32_t max_chunks = NodeArena::kMaxChunks;
  // Source ids (sources holding entries); at most and by default
  // kMaxSources (tests lower it).
  uint32_t max_sources = kMaxSources;
};

class ModelIndex {
 public:
  // nullptr when even the first locator cannot be mapped.
  static std::unique_ptr<ModelIndex> Create(std::string model, MemoryCounter* memory,
                                            const ModelLimits& limits);
  ModelIndex(std::string model, MemoryCounter* memory, const ModelLimits& limits,
             std::unique_ptr<BlockLocator> locator);
  ~ModelIndex();
  ModelIndex(const ModelIndex&) = delete;
  ModelIndex& operator=(const ModelIndex&) = delete;

  const std::string& model() const { return model_; }
  uint32_t block_size() const { return block_size_.load(std::memory_order_acquire); }

  // Writer. Set semantics: inserting a held entry or removing a missing one
  // changes nothing. A source holds an id exactly while it holds an entry:
  // the store that gives it its first entry takes the lowest free id, and
  // the removal or clear that takes its last entry frees the id at once. So
  // the ids in use are the sources holding entries, a function of the
  // entries (which a checkpoint keeps): a replica restored mid-churn refuses
  // exactly the stores the one that read the whole log refuses. A new source
  // beyond limits.max_sources is not indexed (fail closed).
  void SetBlockSize(uint32_t block_size);
  // Returns how many of `hashes` were not indexed for lack of memory: 0, or
  // all from the first block that needed memory beyond the limits (those
  // before it are indexed). *over_source_limit: nothing was indexed, the
  // source would be one more than kMaxSources (counted).
  size_t Store(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes,
               bool* over_source_limit);
  // False when a split it needed could not be allocated: the source was
  // cleared from the model instead (it holds nothing it did not hold before).
  bool Remove(const SourceKey& source, Tier tier, std::span<const uint64_t> hashes);
  // One run of consecutive clears of a message (kCleared of this model or of
  // every model, kWorkerExpired; other kinds are skipped) in one pass over
  // the nodes, as if applied one after the other (README.md, "Clears").
  void Clear(std::span<const PlacementEvent> clears);
  void ForEachEntry(const std::function<void(const SourceKey&, Tier, uint64_t)>& fn) const;
  // ForEachEntry's entries, one call per node and holder (`hashes` points
  // into the node).
  template <typename Fn>
  void ForEachRun(const Fn& fn) const;
  // Writer: the model's entries as they are now, for a reader that goes on
  // while this writer applies (model_capture.h); nullptr while another
  // capture of the model is open. *sources gets the model's sources by id
  // (the ids the capture's runs name).
  std::unique_ptr<ModelCapture> BeginCapture(std::vector<SourceKey>* sources);
  // Writer: room for `blocks` more distinct blocks without a rebuild (a
  // checkpoint restore knows the count up front), within the limits.
  // Distinct blocks held.
  void Reserve(uint64_t blocks) { EnsureRoom(blocks); }
  uint64_t blocks() const;
  // Sources holding at least one entry.
  uint64_t sources_with_entries() const {
    return sources_with_entries_.load(std::memory_order_relaxed);
  }
  // Writer: the bytes ModelLimits::max_bytes counts (arena + locator).
  uint64_t limited_bytes() const;
  const ModelLimits& limits() const { return limits_; }
  // Testing: after `skip` more node allocations, the next `n` fail as if
  // memory were exhausted.
  void FailNodeAllocationsForTesting(uint32_t skip, uint32_t n) {
    arena_.FailAllocationsForTesting(skip, n);
  }

  // Writer (testing, kvindex-bench): see ClearObserver (index_types.h).
  void set_clear_observer(ClearObserver* observer) { clear_observer_ = observer; }
  // Writer: see DepartureObserver (index_types.h).
  void set_departure_observer(DepartureObserver* observer) { departure_observer_ = observer; }

  // Writer thread or quiescent: the locator's shape (histograms: a full scan).
  void ProfileLocator(bool histograms, LocatorProfile* out) const;

  // Any thread. One row per source with longest > 0, ordered as
  // SortWorkerMatches orders them (longest desc, worker, dp_rank).
  void Match(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out) const;
  void AddStats(IndexStats* stats) const;
  void AppendSources(std::vector<SourceInfo>* out) const;

 private:
  // Where the writer found a block.
  struct BlockRef {
    ChainNode* node = nullptr;
    uint32_t offset = 0;
  };
  struct Holder {
    uint32_t group;
    int tier;
    uint64_t bit;
  };
  // Whose limit an allocation is held to: new entries (and optional
  // compaction) stop below the reserve that removals' splits may use.
  enum class Purpose { kNewEntries, kRemoval };

  // The source's record, added (and the sources reranked) when new;
  // nullptr past kMaxSources.
  SourceRecord* FindOrAddSource(const SourceKey& source);
  // Frees the id of a source left without entries by a store or a removal
  // (inside the global bracket); its record is destroyed with the next batch
  // of retired nodes, after a grace period.
  void ReleaseEmptySource(SourceRecord* rec);
  void CountDelta(SourceRecord* rec, Tier tier, int64_t delta);
  uint64_t DigestRange(const SourceRecord* rec, Tier tier, const ChainNode* node, uint32_t lo,
                       uint32_t hi) const;

  // Reader-safe: the node a locator slot names, and whether position
  // (ref, offset) holds `hash`.
  const ChainNode* NodeAt(uint32_t ref) const {
    return static_cast<const ChainNode*>(arena_.Resolve(ref));
  }
  bool HashIs(uint32_t ref, uint32_t offset, uint64_t hash) const;
  // `log` null = removals are excluded (fallback mutex held).
  void MatchOnce(std::span<const uint64_t> seq, std::vector<WorkerMatch>* out,
                 NodeReadLog* log) const;

  // Writer helpers (README.md, "Operations").
  BlockLocator* locator() const { return locator_.load(std::memory_order_relaxed); }
  bool Locate(uint64_t hash, BlockRef* ref, size_t* slot = nullptr) const;
  size_t SlotOf(uint64_t hash) const;
  // Appends the absent blocks from hashes[i] to a new node; returns where
  // it stopped. *full: it stopped for lack of memory (nothing half-written).
  size_t AppendNew(const SourceRecord* rec, Tier tier, std::span<const uint64_t> hashes, size_t i,
                   bool* full, uint64_t* digest, int64_t* added);
  // False (nothing changed) when the split it needs cannot be allocated.
  bool AddHolder(ChainNode* node, uint32_t lo, uint32_t hi, SourceRecord* rec, Tier tier,
                 uint64_t* digest, int64_t* added);
  bool RemoveHolder(ChainNode* node, uint32_t lo, uint32_t hi, SourceRecord* rec, Tier tier,
                    uint64_t* digest, int64_t* removed);
  // nullptr (nothing changed) when a copy cannot be allocated.
  ChainNode* Carve(ChainNode* node, uint32_t lo, uint32_t hi, int need_group, Purpose purpose);
  // A node for CopyRange(node, lo, hi, extra_group, copy), not yet published;
  // nullptr when no memory within `purpose`'s limit.
  ChainNode* AllocCopy(const ChainNode* node, uint32_t lo, uint32_t hi, int extra_group,
                       Purpose purpose);
  ChainNode* CopyRange(const ChainNode* node, uint32_t lo, uint32_t hi, int extra_group,
                       ChainNode* copy);
  void Shrink(ChainNode* node, uint32_t begin, uint32_t end);
  void MaybeCompact(ChainNode* node);
  void EraseRange(const ChainNode* node, uint32_t lo, uint32_t hi);
  // Hashes [lo, hi) of `node` leave the index: tells the departure observer.
  void Departed(const ChainNode* node, uint32_t lo, uint32_t hi) {
    if (departure_observer_ != nullptr && hi > lo) {
      departure_observer_->OnDeparted(model_, {node->hashes() + lo, hi - lo});
    }
  }
  ChainNode* AllocNode(uint32_t num_groups, uint32_t capacity, Purpose purpose);
  void Adopt(ChainNode* node);    // into nodes_
  void Discard(ChainNode* node);  // frees a node never published
  uint32_t ChunkLimit(Purpose purpose) const;
  uint64_t NewEntryBudget() const;  // limits_.max_bytes minus the reserve
  static size_t NodeBytes(const ChainNode* node);
  // False when the locator cannot grow within the limits.
  bool EnsureRoom(size_t blocks);
  bool Rebuild(size_t min_capacity);
  void ReclaimRetired();
  bool RetiredBatchFull() const;
  void FreeRetired();  // after a grace period that began once they were retired
  // Before the writer changes a node's extent or holder bits: an open
  // capture keeps what the node held (model_capture.h).
  void Preserve(const ChainNode* node) { capture_.Preserve(node); }
  void ClearIds(const std::vector<uint32_t>& ids);
  // Clears the `drop` bits of `node` (inside the removal lock); returns the
  // blocks erased (the node lost its last holder) or 0.
  uint32_t ClearNode(ChainNode* node, const uint64_t* drop);

  const std::string model_;
  MemoryCounter* memory_;
  const ModelLimits limits_;
  std::atomic<uint32_t> block_size_{0};

  NodeArena arena_;  // outlives the nodes destroyed in ~ModelIndex
  // Writer only: every node not yet freed (live or retired), for rebuilds,
  // clears and ForEachEntry; ChainNode::index is a node's position here.
  std::vector<ChainNode*, CountingAllocator<ChainNode*>> nodes_;
  std::atomic<BlockLocator*> locator_;
  uint64_t growths_ = 0;  // writer only (ProfileLocator)
  uint64_t overflow_growths_ = 0;
  std::vector<ChainNode*> retired_;  // unreachable, freed after a grace period
  size_t retired_bytes_ = 0;
  std::vector<SourceRecord*> retired_sources_;  // ids freed, destroyed with retired_
  RemovalSeqlock seqlock_;
  GracePeriod grace_;
  // Odd while the writer erases locator slots (which moves others back): a
  // reader whose probe missed during an erase probes once more.
  std::atomic<uint64_t> erase_epoch_{0};

  // The open checkpoint capture's side (model_capture.h).
  CaptureShared capture_;

  // Source ids: records and ranks for readers (source_table.h).
  SourceTable sources_;

  std::atomic<uint64_t> entries_[kNumTiers] = {};
  std::atomic<uint64_t> digest_{0};
  std::atomic<uint64_t> sources_with_entries_{0};
  std::atomic<uint64_t> over_source_limit_{0};       // stored events not indexed
  ClearObserver* clear_observer_ = nullptr;          // writer only
  DepartureObserver* departure_observer_ = nullptr;  // writer only
};

template <typename Fn>
void ModelIndex::ForEachRun(const Fn& fn) const {
  for (const ChainNode* node : nodes_) {
    const uint32_t b = node->begin.load(std::memory_order_relaxed);
    const uint32_t e = node->end.load(std::memory_order_relaxed);
    if (b == e) continue;
    const std::span<const uint64_t> hashes(node->hashes() + b, e - b);
    for (uint32_t g = 0; g < node->num_groups; ++g) {
      const HolderGroup& hg = node->group(g);
      for (int t = 0; t < kNumTiers; ++t) {
        for (uint64_t bits = hg.tiers[t].load(std::memory_order_relaxed); bits != 0;
             bits &= bits - 1) {
          const uint32_t id = hg.group * kGroupBits + std::countr_zero(bits);
          fn(sources_.record(id, std::memory_order_relaxed)->key, static_cast<Tier>(t), hashes);
        }
      }
    }
  }
}

}  // namespace kvindex::index::internal
