// SglangAliasMap: per model, SGLang's own block hashes -> our canonical
// sequence hashes, learned from the replicated log, so SGLang's KV indexer
// API (sglang_indexer.h) answers sgl-router's hashes (docs/compat.md,
// "SGLang").
//
// sgl-router hashes a prompt's pages as a SHA-256 chain (the first 8 bytes
// of each page's digest, big-endian, as i64), and SGLang engines publish the
// same values as their KV events' block_hashes. An agent following an SGLang
// engine sees both an engine hash and the canonical hash it computes from
// the tokens, and publishes the engine's beside the canonical ones on its
// stored events (PlacementEvent::sglang_hashes, docs/events.md). Every
// router keeps them here, beside (not inside) its index:
//
//   SglangAliasMap aliases(&index);
//   index.set_departure_observer(aliases.departure_observer());
//   apply_options.on_applied = [&](auto events) { aliases.OnApplied(events); };
//   aliases.Translate("llama", hashes);  // sgl-router's -> ours, in place
//
// Rules (deterministic from the log and the index, so replicas agree):
// - A stored event whose sglang_hashes count equals its blocks' adds
//   sglang[i] -> canonical[i] for each block; any other count is refused
//   whole and counted (refused_mismatch), the blocks themselves still apply.
// - One to one per model, failing closed: a stored (sglang X, block C) that
//   contradicts an alias (X already aliased to another block, or C already
//   aliased by another SGLang hash Y) is a conflict: the aliases of X and of
//   C are dropped and X (and Y) are poisoned: never aliased again in that
//   model, so a node that stores its block under another prompt's SGLang
//   hash cannot make sgl-router's query for that prompt answer its block
//   (whoever came first). At most max_poisoned poisoned hashes per model;
//   once a model has that many, it learns no new alias at all (counted in
//   refused_poisoned): an undercount, never an overcount, never unbounded.
// - An alias lives as long as some source holds its canonical block in the
//   index: after the index applied a message, the aliased blocks that left
//   the index during it (the index reports them: index::DepartureObserver;
//   a removal of the last holder, a clear, a worker or agent expiry), that
//   it did not take from a stored event (memory, source or model limits:
//   reported too), and that nobody holds after it, lose their aliases. So it never answers for a
//   block nobody holds (fail closed); and a query goes through the index
//   anyway.
// - At most SglangAliasOptions::max_entries aliases per model (so a router
//   that follows only some models keeps the same aliases for them as one
//   that follows all); past it new aliases are refused (refused_full): an
//   undercount, never unbounded memory.
// - Checkpointed with the index (storage/checkpointer.h, AliasCheckpoint):
//   SaveState on the writer thread at the capture's log position (so it
//   matches the checkpointed index exactly: the map is only changed by
//   OnApplied, which runs before the capture), RestoreState after the
//   index is restored; exported and imported with the rest of the
//   checkpoint (--bootstrap-from). A checkpoint without the record (older
//   ones) restores an empty map: an undercount until new stored events
//   refill it, never an overcount.
//
// Cost: OnApplied O(blocks) flat-hash-map operations per stored event, one
// flat-hash-map lookup per block that left the index or was not taken, and
// one one-block index lookup per such block that has an alias and may be
// held after the message (through IndexInterface::MatchSequenceHashes: its
// result allocates a row when another source holds the block); nothing per
// removed block another source still holds; no allocation per block once
// the tables and scratch vectors have grown. A clear costs what it takes away,
// not the size of the map (docs/benchmarks.md, "SGLang aliases").
// Translate: one shared lock and one flat-hash-map lookup per hash.
// Memory: two slots of 16 bytes (+1 control byte) per alias, counted in
// Stats().bytes.
//
// Thread safety: OnApplied, Clear, SaveState, RestoreState and the
// departure observer (called by the index inside ApplyMessage) from the
// index's writer thread; what the observer heard is looked at by the next
// OnApplied, so every ApplyMessage is followed by OnApplied, or by
// RestoreState or Clear (a checkpoint restore that fails and clears the
// index: storage/checkpointer.cc), which drop it;
// Translate, Find, Stats and Entries from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "shared/base/mutex.h"
#include "shared/base/status.h"
#include "shared/index/index_interface.h"
#include "shared/model/placement_event.h"

namespace kvindex::compat {

struct SglangAliasOptions {
  // Aliases held per model. Default: 4Mi (~140 MB per model at most).
  size_t max_entries = size_t{1} << 22;
  // Poisoned SGLang hashes held per model (conflicts); at this many the
  // model learns no new alias. Default: 64Ki (~1.1 MB per model at most).
  size_t max_poisoned = size_t{1} << 16;
};

struct SglangAliasStats {
  uint64_t entries = 0;  // aliases held
  uint64_t bytes = 0;    // bytes of their tables
  uint64_t added = 0;
  uint64_t removed = 0;
  // Stored events whose sglang_hashes count differs from their blocks'
  // (hostile or broken sender): their aliases are not added.
  uint64_t refused_mismatch = 0;
  // Aliases not added: max_entries held.
  uint64_t refused_full = 0;
  // Stored (SGLang hash, block) pairs contradicting an alias: both aliases
  // dropped, the SGLang hashes poisoned.
  uint64_t conflicts = 0;
  uint64_t poisoned = 0;  // poisoned SGLang hashes held
  // Aliases not added: the SGLang hash is poisoned, or the model holds
  // max_poisoned poisoned hashes.
  uint64_t refused_poisoned = 0;
};

struct SglangAlias {
  std::string model;
  uint64_t sglang = 0;  // SGLang's hash (i64 bits)
  uint64_t canonical = 0;
  friend bool operator==(const SglangAlias&, const SglangAlias&) = default;
  friend auto operator<=>(const SglangAlias&, const SglangAlias&) = default;
};

class SglangAliasMap {
 public:
  // `index` (the one the log is applied to) must outlive the map.
  explicit SglangAliasMap(const index::IndexInterface* index, SglangAliasOptions options = {});
  ~SglangAliasMap();
  SglangAliasMap(const SglangAliasMap&) = delete;
  SglangAliasMap& operator=(const SglangAliasMap&) = delete;

  // What the owner hands to the index (IndexInterface::set_departure_observer)
  // before the first message: without it, clears and expiries leave aliases
  // of blocks nobody holds.
  index::DepartureObserver* departure_observer() { return &departures_; }

  // Writer thread, right after the index applied `events` (one log message;
  // ApplyOptions::on_applied).
  void OnApplied(std::span<const PlacementEvent> events);
  // Writer thread: forget every alias (the index was replaced).
  void Clear();

  // The whole map (per model: its aliases, poisoned hashes and closed
  // flag) as bytes, for a checkpoint. Writer thread (nothing changes it
  // meanwhile); O(aliases + poisoned).
  std::string SaveState() const;
  // Replaces the whole map with a SaveState's bytes; "" gives an empty map
  // (a checkpoint without the record). DataLoss when the bytes do not
  // decode or break the map's rules (an SGLang hash or a block aliased
  // twice, a poisoned hash aliased, more than the limits): the map is then
  // empty (fail closed). The counters of Stats() other than entries and
  // poisoned are this process's and are kept. Writer thread, before apply.
  Status RestoreState(std::string_view state);

  // Replaces each hash of `model` that is an SGLang hash with an alias by
  // its canonical hash; the others are left as they are. Returns how many
  // were replaced.
  size_t Translate(std::string_view model, std::span<uint64_t> hashes) const;
  std::optional<uint64_t> Find(std::string_view model, uint64_t sglang) const;

  SglangAliasStats Stats() const;
  // Every alias, sorted (tests, diagnostics).
  std::vector<SglangAlias> Entries() const;

 private:
  struct ModelAliases {
    absl::flat_hash_map<uint64_t, uint64_t> forward;  // sglang -> canonical
    absl::flat_hash_map<uint64_t, uint64_t> reverse;  // canonical -> sglang
    absl::flat_hash_set<uint64_t> poisoned;           // sglang hashes
    bool closed = false;                              // max_poisoned reached
  };
  class Departures final : public index::DepartureObserver {
   public:
    explicit Departures(SglangAliasMap* map) : map_(map) {}
    void OnDeparted(std::string_view model, std::span<const uint64_t> hashes) override {
      map_->NoteGone(model, hashes, /*departed=*/true);
    }
    // The message's stored event still adds their aliases (OnApplied runs
    // after): the index is asked whether another source holds them, so an
    // alias of a block nobody holds does not stay.
    void OnNotIndexed(std::string_view model, std::span<const uint64_t> hashes) override {
      map_->NoteGone(model, hashes, /*departed=*/false);
    }

   private:
    SglangAliasMap* const map_;
  };
  // True when some source holds `canonical` in `model` (index lookup).
  bool Held(std::string_view model, uint64_t canonical) const;
  // Writer thread: `hashes` of `model` left the index (`departed`) or were
  // not indexed; looked at by the next OnApplied.
  void NoteGone(std::string_view model, std::span<const uint64_t> hashes, bool departed);
  void ForgetGone();
  ModelAliases* ModelOf(std::string_view model, bool create) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Add(ModelAliases& aliases, const PlacementEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseCanonical(ModelAliases& aliases, uint64_t canonical) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Poison(ModelAliases& aliases, uint64_t sglang) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const index::IndexInterface* const index_;
  const SglangAliasOptions options_;
  mutable SharedMutex mu_;
  // Models are never dropped (the index never drops one either).
  absl::flat_hash_map<std::string, std::unique_ptr<ModelAliases>> models_ ABSL_GUARDED_BY(mu_);
  SglangAliasStats stats_ ABSL_GUARDED_BY(mu_);

  // Writer thread only: scratch reused across messages.
  struct Candidate {
    ModelAliases* aliases;
    std::string_view model;
    uint64_t canonical;
    bool look;  // whether the index must be asked if some source holds it
  };
  std::vector<Candidate> candidates_;
  std::vector<const Candidate*> erase_;  // candidates nobody holds any more
  // Blocks that left the index or were not indexed since the last
  // OnApplied, as runs of one model.
  struct GoneRun {
    size_t model;       // into gone_models_
    size_t begin, end;  // into gone_hashes_
    bool departed;      // reported leaving the index (else not indexed)
  };
  std::vector<GoneRun> gone_runs_;
  std::vector<uint64_t> gone_hashes_;
  // The runs' model names, copied (the index's are valid only during the
  // call); the first gone_models_used_ are this message's,
  // the strings kept so their buffers are reused.
  std::vector<std::string> gone_models_;
  size_t gone_models_used_ = 0;
  Departures departures_{this};
};

}  // namespace kvindex::compat
