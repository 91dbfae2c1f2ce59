// BlockTable: the open-addressing table behind one model's tiered index.
//
// One 16-byte slot per (canonical hash, tier, source group): the full hash and
// a word holding the tag (tier, group) in its top 8 bits and a bitmap of up to
// 56 source ids of that group in the low 56 bits. Linear probing from a home
// slot derived from the hash only, so every (tier, group) slot of one block
// sits in the same probe run: a query reads one run (usually one or two
// adjacent cache lines) per block and learns every tier and holder at once.
// An empty slot has word == 0 (an occupied slot always has a holder bit set),
// so any 64-bit hash value is a valid key.
//
// Storage is one anonymous mapping (huge pages advised when large), so the
// bytes reported are the bytes mapped.
//
// Thread safety: one writer (Set/Clear/Insert); readers may Scan concurrently.
// Insertions never move slots and publish a slot by storing its word last
// (release), so a concurrent reader sees a slot either absent or complete.
// ClearHolder may move slots (backward-shift deletion); it marks every line it
// writes in the model's LineVersions first, and the caller releases the marks
// at the end of its removal bracket, so readers that read those lines retry.
// Complexity: expected O(1) probes per operation at load <= kMaxLoad.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shared/index/internal/memory.h"
#include "shared/index/internal/read_sync.h"

namespace kvindex::index::internal {

inline constexpr int kGroupBits = 56;                             // source ids per group
inline constexpr int kMaxGroups = 64;                             // 6 tag bits
inline constexpr uint32_t kMaxSources = kGroupBits * kMaxGroups;  // ids per model
inline constexpr uint64_t kHolderMask = (uint64_t{1} << kGroupBits) - 1;

inline constexpr uint64_t MakeTag(uint32_t tier, uint32_t group) {
  return (uint64_t{group} << 2 | tier) << kGroupBits;
}
inline constexpr uint32_t TagTier(uint64_t word) { return (word >> kGroupBits) & 3; }
inline constexpr uint32_t TagGroup(uint64_t word) { return static_cast<uint32_t>(word >> 58); }

struct Slot {
  std::atomic<uint64_t> key;   // canonical sequence hash
  std::atomic<uint64_t> word;  // tag << 56 | holder bitmap; 0 = empty
};
static_assert(sizeof(Slot) == 16);

class BlockTable {
 public:
  // Grow when more than this fraction of slots is used: linear probing runs
  // stay short (a query reads each run to its end).
  static constexpr double kMaxLoad = 0.7;
  static constexpr size_t kSlotsPerLine = 4;

  BlockTable(size_t capacity, MemoryCounter* memory);
  ~BlockTable();
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t mapped_bytes() const { return mapped_bytes_; }
  bool Full() const { return used_ >= max_used_; }

  // Homes are cache-line aligned (4 slots per 64-byte line): a run starts at
  // a line boundary, so most lookups read exactly one line. The multiplicative
  // scramble keeps restored or synthetic keys (sequential ids) from piling up.
  size_t Home(uint64_t hash) const {
    const uint64_t mixed = hash * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed) * lines_) >> 64) *
           kSlotsPerLine;
  }
  size_t Next(size_t i) const { return i + 1 == capacity_ ? 0 : i + 1; }
  const Slot& slot(size_t i) const { return slots_[i]; }
  size_t lines() const { return lines_; }
  // Reader: the home line and the next one (a run of a block held in several
  // tiers or groups, or at high load, often spills into it).
  void Prefetch(uint64_t hash) const {
    const size_t home = Home(hash);
    __builtin_prefetch(&slots_[home], 0, 1);
    __builtin_prefetch(&slots_[home + kSlotsPerLine == capacity_ ? 0 : home + kSlotsPerLine], 0, 1);
  }

  // Reader: ORs the holder bits of every slot of `hash` into acc[tag >> 56]
  // (tag = group << 2 | tier; acc has 4 * groups entries; slots of groups >=
  // `groups` are skipped). Scans whole lines without data-dependent branches
  // except "is the line full": occupied slots of a line always form a prefix
  // of it (homes are line starts and runs have no holes), so a line with an
  // empty last slot ends the run.
  // With `log`, records each line's version (from `versions`) before reading
  // it, for validation at the end of the query.
  void CollectHolders(uint64_t hash, uint32_t groups, uint64_t* acc, const LineVersions* versions,
                      ReadLog* log) const {
    size_t i = Home(hash);
    for (size_t line = 0; line < lines_; ++line) {
      if (log != nullptr) {
        const uint32_t version = versions->Read(i / kSlotsPerLine);
        log->conflict |= (version & 1) != 0;
        log->entries.push_back(uint64_t{i / kSlotsPerLine} << 32 | version);
      }
      const Slot* s = &slots_[i];
      for (size_t x = 0; x < kSlotsPerLine; ++x) {
        const uint64_t word = s[x].word.load(std::memory_order_acquire);
        const uint64_t key = s[x].key.load(std::memory_order_relaxed);
        const uint32_t tag = static_cast<uint32_t>(word >> kGroupBits);
        const uint64_t hit = 0 - static_cast<uint64_t>(key == hash && (tag >> 2) < groups);
        acc[tag & hit] |= word & kHolderMask & hit;
      }
      if (s[kSlotsPerLine - 1].word.load(std::memory_order_relaxed) == 0) return;
      i += kSlotsPerLine;
      if (i == capacity_) i = 0;
    }
  }

  // Lines written by ClearHolder are marked here first (null: table not yet
  // visible to readers).
  void set_versions(LineVersions* versions) { versions_ = versions; }

  void PrefetchForWrite(uint64_t hash) const { __builtin_prefetch(&slots_[Home(hash)], 1, 1); }

  // Writer: adds `bit` (holder bits of one group) to the slot (hash, tag);
  // creates the slot if needed. Returns false if the bit was already set.
  // Requires !Full() when the slot may be new.
  bool SetHolder(uint64_t hash, uint64_t tag, uint64_t bit);
  // Writer, inside the removal seqlock: removes `bit`; deletes the slot when
  // no holder is left. Returns false if the bit was not set.
  bool ClearHolder(uint64_t hash, uint64_t tag, uint64_t bit);
  // Writer, table not yet visible to readers: inserts a slot known to be absent.
  void InsertFresh(uint64_t hash, uint64_t word);

 private:
  void DeleteAt(size_t i);
  void MarkLine(size_t slot) {
    if (versions_ != nullptr) versions_->Mark(slot / kSlotsPerLine);
  }

  Slot* slots_ = nullptr;
  size_t capacity_ = 0;  // a multiple of kSlotsPerLine
  size_t lines_ = 0;
  size_t used_ = 0;
  size_t max_used_ = 0;
  size_t mapped_bytes_ = 0;
  MemoryCounter* memory_;
  LineVersions* versions_ = nullptr;
};

}  // namespace kvindex::index::internal
