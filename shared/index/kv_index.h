// KvIndex: the tiered KV-cache placement index of the router.
//
// Answers "which sources hold the longest prefix of this request, and in which
// tier" (semantics.md sections 4-6) for every model, while one writer thread
// applies the totally ordered placement log. One tiered index per model is
// created on the model's first stored event.
//
// Use KvIndex in production; ReferenceIndex (reference_index.h) is the naive
// oracle for tests. Both implement IndexInterface.
//
//   KvIndex index;
//   index.Apply(stored_event, 1);                      // writer thread
//   StatusOr<MatchResult> m = index.MatchSequenceHashes("llama", seq);  // any thread
//   for (const WorkerMatch& w : m->workers) Route(w.source, w.device_prefix);
//
// Complexity (n = blocks of a query or event, r = rows of a match):
// Apply stored/removed O(n) expected; a message's run of consecutive
// cleared / worker_expired events O(nodes of each model), one pass; match O(nodes entered + n/8
// cache lines + r x distinct lengths), stopping at the first block no source holds; Stats
// O(models).
//
// Thread safety: Apply*/Restore* from ONE writer thread; everything else from
// any thread concurrently. Readers never block on the writer except, after a
// few failed optimistic attempts, for at most one removal run. Under
// concurrent writes a match may undercount but never overcount: it never
// reports a block after its removal returned, and never a prefix longer than
// one state the writer passed through (see README.md, "Concurrency").
// ForEachEntry: writer thread or quiescent; BeginCapture on the writer
// thread, its capture read on any one thread while the writer applies. A checkpoint restore is
// RestoreEntry calls ended by RestoreAppliedSeq (entries are buffered until
// then).
//
// Memory: a model's structures are committed as they grow (a model with a
// few blocks costs a few KiB); KvIndexOptions::max_models caps how many
// models are created and max_model_bytes each one's node arena and
// block locator. New entries stop below the cap (the rest of their event is
// not indexed; ApplyMessage reports ResourceExhausted and Stats counts
// them); removals use the reserve kept below it, and one that still cannot
// split a node clears its source from the model; clears and expiries need
// no memory. Nothing throws when memory runs out (README.md, "Memory
// limits").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shared/base/status.h"
#include "shared/index/index_interface.h"
#include "shared/index/index_types.h"
#include "shared/model/placement_event.h"

namespace kvindex::index {

namespace internal {
class ModelIndex;
class MemoryCounter;
struct ModelList;
}  // namespace internal

struct KvIndexOptions {
  // Bytes of node arena + block locator per model (the bulk of its memory).
  // New entries stop max(2 MiB, 1/32 of it) below, which is left to the
  // splits of removals. Default: 0 = only the hard limit (8 GiB of nodes).
  uint64_t max_model_bytes = 0;
  // Testing: node arena chunks (2 MiB) per model, the hard limit; at most
  // and by default 4096.
  uint32_t max_arena_chunks = 4096;
  // Testing: source ids per model (sources holding entries); at most and by
  // default 4096. A new source past it is not indexed (counted in
  // IndexStats::events_over_source_limit).
  uint32_t max_sources_per_model = 4096;
  // Models the index creates, in log order; stored events of further models
  // are not indexed (counted in IndexStats::events_over_model_limit and
  // reported by ApplyMessage as ResourceExhausted). 0 = no cap. A model
  // costs what it holds (an empty one a few KiB), but never shrinks.
  uint32_t max_models = 0;
};

class KvIndex final : public IndexInterface {
 public:
  KvIndex();
  explicit KvIndex(const KvIndexOptions& options);
  ~KvIndex() override;
  KvIndex(const KvIndex&) = delete;
  KvIndex& operator=(const KvIndex&) = delete;

  ApplyResult ApplyMessage(std::span<const PlacementEvent> events, uint64_t log_position) override;
  StatusOr<MatchResult> MatchSequenceHashes(std::string_view model,
                                            std::span<const uint64_t> seq_hashes,
                                            const MatchOptions& options = {}) const override;
  void set_departure_observer(DepartureObserver* observer) override;
  std::optional<uint32_t> BlockSize(std::string_view model) const override;
  std::vector<std::string> Models() const override;
  IndexStats Stats() const override;
  std::vector<SourceInfo> Sources() const override;
  void ForEachEntry(const EntryVisitor& fn) const override;
  // One call per node and holder, `hashes` pointing into the node.
  void ForEachRun(const RunVisitor& fn) const override;
  // Writer thread: a pause of O(nodes + sources), copying one pointer per
  // node; the capture then reads the nodes in place (internal/model_capture.h).
  StatusOr<std::unique_ptr<IndexCapture>> BeginCapture() const override;
  void RestoreEntry(std::string_view model, const SourceKey& source, Tier tier, uint64_t seq_hash,
                    uint32_t block_size) override;
  void RestoreAppliedSeq(uint64_t log_position) override;
  void RestoreRun(std::string_view model, const SourceKey& source, Tier tier,
                  std::span<const uint64_t> hashes, uint32_t block_size) override;
  void ReserveBlocks(std::string_view model, uint64_t blocks) override;
  uint64_t DistinctBlocks(std::string_view model) const override;
  // O(1) for the count alone (no `out`).
  size_t ModelSources(std::string_view model, std::vector<SourceKey>* out) const override;

  // Diagnostics (writer thread or quiescent index; kvindex-bench index
  // --profile): the block locator of `model`, nullopt when it does not exist.
  // `histograms` scans every slot.
  std::optional<LocatorProfile> ProfileLocator(std::string_view model, bool histograms) const;

  // Testing (writer thread): after `skip` more node allocations of `model`
  // (which must exist), the next `n` fail as if its memory were exhausted.
  void FailNodeAllocationsForTesting(std::string_view model, uint32_t skip, uint32_t n);
  // Testing and kvindex-bench (writer thread): `observer` (null: none) is told
  // of every clear's passes and removal-lock holds, in every model.
  void SetClearObserverForTesting(ClearObserver* observer);

 private:
  // Exhaustion is added to *result; *exhausted names the first model short
  // of memory.
  void ApplyEvent(const PlacementEvent& event, ApplyResult* result, std::string_view* exhausted);
  // Stores into `model` (created on first use); counts and returns the
  // blocks not indexed.
  struct StoreOutcome {
    size_t not_indexed = 0;  // blocks left out for lack of memory
    // Nothing stored (counted): the model did not exist and max_models are
    // held, or the model holds kMaxSources other sources.
    bool over_model_limit = false;
    bool over_source_limit = false;
  };
  StoreOutcome StoreBlocks(std::string_view model, const SourceKey& source, Tier tier,
                           std::span<const uint64_t> hashes, uint32_t block_size);
  const internal::ModelIndex* FindModel(std::string_view model) const;
  // Every model, by name.
  std::vector<const internal::ModelIndex*> SortedModels() const;
  // nullptr: no memory for it, or max_models reached (*over_limit set,
  // counted).
  internal::ModelIndex* GetOrCreateModel(std::string_view model, bool* over_limit);
  // Applies the buffered run of restored entries as one stored event.
  void FlushRestore();

  const KvIndexOptions options_;
  std::unique_ptr<internal::MemoryCounter> memory_;
  // Append-only list of models (kv_index.cc), replaced by one twice its size
  // when full; old lists are kept until destruction (models are never
  // dropped), so readers need no lock and no grace period to look a model up.
  std::atomic<const internal::ModelList*> models_;
  std::vector<std::unique_ptr<internal::ModelList>> model_lists_;
  std::vector<std::unique_ptr<internal::ModelIndex>> owned_models_;
  std::atomic<uint64_t> applied_seq_{0};
  std::atomic<uint64_t> blocks_not_indexed_{0};
  std::atomic<uint64_t> sources_cleared_on_exhaustion_{0};
  std::atomic<uint64_t> events_over_model_limit_{0};
  ClearObserver* clear_observer_ = nullptr;          // writer only
  DepartureObserver* departure_observer_ = nullptr;  // writer only

  // RestoreEntry buffers consecutive entries of one (model, source, tier), as
  // ForEachEntry yields them node by node, so a restore rebuilds whole nodes
  // instead of one node per entry. Flushed by RestoreAppliedSeq and Apply.
  struct PendingRestore {
    std::string model;
    SourceKey source;
    Tier tier = Tier::kDevice;
    uint32_t block_size = 0;
    std::vector<uint64_t> hashes;
  };
  PendingRestore restore_;
};

}  // namespace kvindex::index
