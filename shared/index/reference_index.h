// ReferenceIndex: the deliberately naive test oracle of the tiered index.
//
// Written from semantics.md sections 4-6 alone, not from KvIndex's structure:
// each model is an ordered set of (source, tier, hash) entries; a match walks
// every source and every block; the digest is recomputed from scratch. Slow
// (O(entries) per query) and obviously correct: differential_test.cc replays
// random event streams through it and KvIndex and compares every answer.
//
//   ReferenceIndex oracle;
//   oracle.Apply(event, 1);
//   EXPECT_EQ(*oracle.MatchSequenceHashes("m", seq), *index.MatchSequenceHashes("m", seq));
//
// Thread safety: none; single-threaded tests only. bytes_allocated is 0.
#pragma once

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "shared/index/index_interface.h"

namespace kvindex::index {

class ReferenceIndex : public IndexInterface {
 public:
  // max_sources_per_model as KvIndexOptions's: a stored event of a source
  // that holds no entry of its model, while the model's sources holding
  // entries number this many, is not indexed and counted.
  explicit ReferenceIndex(size_t max_sources_per_model = 4096)
      : max_sources_(max_sources_per_model) {}
  ApplyResult ApplyMessage(std::span<const PlacementEvent> events, uint64_t log_position) override;
  StatusOr<MatchResult> MatchSequenceHashes(std::string_view model,
                                            std::span<const uint64_t> seq_hashes,
                                            const MatchOptions& options = {}) const override;
  std::optional<uint32_t> BlockSize(std::string_view model) const override;
  std::vector<std::string> Models() const override;
  IndexStats Stats() const override;
  std::vector<SourceInfo> Sources() const override;
  void ForEachEntry(const EntryVisitor& fn) const override;
  void RestoreEntry(std::string_view model, const SourceKey& source, Tier tier, uint64_t seq_hash,
                    uint32_t block_size) override;
  void RestoreAppliedSeq(uint64_t log_position) override { applied_seq_ = log_position; }
  void set_departure_observer(DepartureObserver* observer) override {
    departure_observer_ = observer;
  }

 protected:
  using Entry = std::tuple<SourceKey, Tier, uint64_t>;
  struct Model {
    uint32_t block_size = 0;
    std::set<Entry> entries;
  };
  // Hook for the self-test's deliberately broken index.
  virtual void Erase(Model& model, const Entry& entry) { model.entries.erase(entry); }

 private:
  void ApplyEvent(const PlacementEvent& event, ApplyResult* result);
  // Erase, telling the departure observer when no entry of the hash is left.
  void EraseEntry(const std::string& name, Model& model, const Entry& entry);
  static bool HoldsAny(const Model& model, const SourceKey& source);
  static size_t SourcesWithEntries(const Model& model);

  const size_t max_sources_;
  std::map<std::string, Model, std::less<>> models_;
  uint64_t applied_seq_ = 0;
  uint64_t events_over_source_limit_ = 0;
  DepartureObserver* departure_observer_ = nullptr;
};

// Every entry of an index as a comparable set (tests compare two indexes).
using EntryRow = std::tuple<std::string, SourceKey, Tier, uint64_t>;
inline std::set<EntryRow> EntryRows(const IndexInterface& index) {
  std::set<EntryRow> rows;
  index.ForEachEntry([&](std::string_view m, const SourceKey& s, Tier t, uint64_t h) {
    rows.insert({std::string(m), s, t, h});
  });
  return rows;
}

}  // namespace kvindex::index
