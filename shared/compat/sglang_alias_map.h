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
//   apply_options.on_applied = [&](auto events) { aliases.OnApplied(events); };
//   aliases.Translate("llama", hashes);  // sgl-router's -> ours, in place
//
// Rules (deterministic from the log and the index, so replicas agree):
// - A stored event whose sglang_hashes count equals its blocks' adds
//   sglang[i] -> canonical[i] for each block; any other count is refused
//   whole and counted (refused_mismatch), the blocks themselves still apply.
// - One to one per model: an SGLang hash already aliased to another block,
//   or a block already aliased by another SGLang hash, is not added
//   (conflicts; the first stays).
// - An alias lives as long as some source holds its canonical block in the
//   index: after the index applied a message, the canonical blocks of its
//   removed events that nobody holds any more lose their aliases, and a
//   clear, worker expiry or agent expiry (cleared events) sweeps the
//   affected models (every alias whose block nobody holds is dropped). So
//   it never answers for a block nobody holds (fail closed); and a query
//   goes through the index anyway. (A block the index left out for lack of
//   memory keeps its alias until its removal or the next sweep: harmless,
//   the index answers nothing for it.)
// - At most SglangAliasOptions::max_entries aliases in all; past it new
//   aliases are refused (refused_full): an undercount, never unbounded
//   memory.
// - Not checkpointed: after a restore the map refills from new stored
//   events only (an undercount until then, never an overcount).
//
// Cost: OnApplied O(blocks) flat-hash-map operations per stored event (no
// allocation per block once the tables have grown), one one-block index
// lookup per removed block that has an alias (through
// IndexInterface::MatchSequenceHashes: its result allocates a row when
// another source still holds the block; a cheaper "is it held" query of
// the index would remove that), and O(aliases of the model) lookups per
// message with a clear. Translate: one shared lock and one
// flat-hash-map lookup per hash. Memory: two slots of 16 bytes (+1 control
// byte) per alias, counted in Stats().bytes.
//
// Thread safety: OnApplied and Clear from the index's writer thread;
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
#include "shared/base/mutex.h"
#include "shared/index/index_interface.h"
#include "shared/model/placement_event.h"

namespace kvindex::compat {

struct SglangAliasOptions {
  // Aliases held in all models. Default: 4Mi (~140 MB at most).
  size_t max_entries = size_t{1} << 22;
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
  // Aliases not added: the SGLang hash or the block has another alias.
  uint64_t conflicts = 0;
  // Sweeps of a model after a clear.
  uint64_t sweeps = 0;
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

  // Writer thread, right after the index applied `events` (one log message;
  // ApplyOptions::on_applied).
  void OnApplied(std::span<const PlacementEvent> events);
  // Writer thread: forget every alias (the index was replaced).
  void Clear();

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
  };
  // True when some source holds `canonical` in `model` (index lookup).
  bool Held(std::string_view model, uint64_t canonical) const;
  ModelAliases* ModelOf(std::string_view model, bool create) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Add(ModelAliases& aliases, const PlacementEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseCanonical(ModelAliases& aliases, uint64_t canonical) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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
  };
  std::vector<Candidate> candidates_;
  std::vector<size_t> gone_;       // candidates nobody holds any more
  std::vector<uint64_t> victims_;  // a sweep's blocks nobody holds
};

}  // namespace kvindex::compat
