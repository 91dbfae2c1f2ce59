// BaselineIndex: the design other open-source indexers use, measured in the
// same run as KvIndex: one hash map from block hash to a hash set of
// (source, tier), behind a reader-writer lock held for a whole event (writes)
// or a whole query (reads). Single model (events of other models are
// ignored). Correct for the benchmark's streams (the peer checksums are
// verified against it too); not a production index.
//
// Thread safety: Apply from one writer; Match from any thread (shared lock).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "shared/base/mutex.h"
#include "shared/index/index_interface.h"
#include "shared/index/internal/memory.h"

namespace kvindex::bench {

class BaselineIndex final : public index::IndexInterface {
 public:
  explicit BaselineIndex(std::string model);

  index::ApplyResult ApplyMessage(std::span<const PlacementEvent> events,
                                  uint64_t log_position) override;
  StatusOr<index::MatchResult> MatchSequenceHashes(
      std::string_view model, std::span<const uint64_t> seq_hashes,
      const index::MatchOptions& options = {}) const override;
  std::optional<uint32_t> BlockSize(std::string_view model) const override;
  std::vector<std::string> Models() const override { return {model_}; }
  index::IndexStats Stats() const override;
  std::vector<index::SourceInfo> Sources() const override { return {}; }
  void ForEachEntry(const EntryVisitor&) const override {}
  void RestoreEntry(std::string_view, const SourceKey&, Tier, uint64_t, uint32_t) override {}
  void RestoreAppliedSeq(uint64_t) override {}
  // The benchmarks' baseline: applies and looks up, restores nothing and
  // reports no departures.
  void set_departure_observer(index::DepartureObserver*) override {}

 private:
  void ApplyLocked(const PlacementEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Member: source id << 2 | tier.
  using HolderSet = absl::flat_hash_set<uint32_t, absl::Hash<uint32_t>, std::equal_to<uint32_t>,
                                        index::internal::CountingAllocator<uint32_t>>;
  using BlockMap =
      absl::flat_hash_map<uint64_t, HolderSet, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                          index::internal::CountingAllocator<std::pair<const uint64_t, HolderSet>>>;

  uint32_t SourceId(const SourceKey& source) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseSource(uint32_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string model_;
  mutable index::internal::MemoryCounter memory_;
  mutable SharedMutex mu_;
  BlockMap blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SourceKey, uint32_t> ids_ ABSL_GUARDED_BY(mu_);
  std::vector<SourceKey> keys_ ABSL_GUARDED_BY(mu_);
  uint64_t entries_[kNumTiers] ABSL_GUARDED_BY(mu_) = {};
  uint32_t block_size_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t applied_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvindex::bench
