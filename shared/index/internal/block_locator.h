// BlockLocator: sequence hash -> (node reference, offset) of the block in its ChainNode.
//
// Open addressing with linear probing over 8-byte slots:
//
//   [63:36] node reference (28 bits; 0 = empty)  [35:24] offset in the node (12 bits)
//   [23:16] displacement from the home slot      [15:0]  tag (low 16 bits of the hash)
//
// The full hash is not stored: it already sits in the node's hash array, and a
// lookup confirms a tag match there (`is_block`). The tag makes a confirmation
// on a wrong block rare (1 in 65,536 per slot looked at); the displacement
// lets a deletion shift later slots back without reading their hashes.
// 8-byte slots at <= 75% load cost 10.7-21 bytes per block, plus 8 in the node.
//
// Storage is one anonymous mapping (huge pages advised when large), so the
// bytes reported are the bytes mapped.
//
// Thread safety: one writer (Insert/Relabel/Erase); readers Find concurrently.
// Every slot is one atomic word, so a reader sees a slot either before or after
// a write. Insert never moves slots; Erase shifts later slots back, so a
// reader racing it may miss a block (the model index re-probes once when a
// deletion ran during the lookup; a miss can only undercount).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class BlockLocator {
 public:
  // Grow past kMaxLoad, to kGrowLoad: short probe runs (an erase scans its
  // run to the end) at 12-18 bytes per block.
  static constexpr double kMaxLoad = 0.65;
  static constexpr double kGrowLoad = 0.45;
  static constexpr uint32_t kMaxDisplacement = 255;
  static constexpr size_t kNotFound = ~size_t{0};

  // A table of at least `capacity` slots; nullptr when it cannot be mapped.
  static std::unique_ptr<BlockLocator> Create(size_t capacity, MemoryCounter* memory);
  // The bytes Create(capacity) maps: what growing to it costs.
  static size_t MappedBytes(size_t capacity);
  ~BlockLocator();
  BlockLocator(const BlockLocator&) = delete;
  BlockLocator& operator=(const BlockLocator&) = delete;

  static uint32_t NodeRef(uint64_t slot) { return static_cast<uint32_t>(slot >> 36); }
  static uint32_t Offset(uint64_t slot) { return static_cast<uint32_t>(slot >> 24) & 0xFFF; }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t mapped_bytes() const { return mapped_bytes_; }
  bool HasRoomFor(size_t blocks) const { return used_ + blocks <= max_used_; }
  // Blocks that fit before the table must grow.
  size_t Room() const { return max_used_ > used_ ? max_used_ - used_ : 0; }

  size_t Home(uint64_t hash) const {
    const uint64_t mixed = hash * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed) * capacity_) >> 64);
  }
  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[Home(hash)], 0, 1); }
  // The home line and the next: a run (and a deletion's backward shift)
  // often continues past the line end.
  void PrefetchForWrite(uint64_t hash) const {
    const size_t home = Home(hash);
    __builtin_prefetch(&slots_[home], 1, 1);
    __builtin_prefetch(&slots_[home + 8 < capacity_ ? home + 8 : 0], 1, 1);
  }

  // The slot holding `hash` (its value in *slot), else the empty slot where it
  // would go (*slot = 0); kNotFound when that exceeds kMaxDisplacement.
  // `is_block(node_ref, offset)` says whether that node position holds `hash`.
  template <typename IsBlock>
  size_t Probe(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    const uint64_t tag = hash & 0xFFFF;
    size_t i = Home(hash);
    for (uint32_t d = 0; d <= kMaxDisplacement; ++d) {
      const uint64_t s = slots_[i].load(std::memory_order_acquire);
      *slot = s;
      if (s == 0 || ((s & 0xFFFF) == tag && is_block(NodeRef(s), Offset(s)))) return i;
      i = i + 1 == capacity_ ? 0 : i + 1;
    }
    return kNotFound;
  }

  // The slot index of `hash` (its value, as checked, in *slot), or kNotFound.
  template <typename IsBlock>
  size_t Find(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    const size_t i = Probe(hash, is_block, slot);
    return i != kNotFound && *slot != 0 ? i : kNotFound;
  }

  // Writer: fills the empty slot `i` that Probe returned for `hash`.
  void Fill(size_t i, uint64_t hash, uint32_t node_ref, uint32_t offset) {
    const size_t home = Home(hash);
    const uint64_t d = i >= home ? i - home : i + capacity_ - home;
    slots_[i].store(Pack(node_ref, offset, d << 16 | (hash & 0xFFFF)), std::memory_order_release);
    ++used_;
  }
  // Writer: adds a block known to be absent. False when its probe run would
  // exceed kMaxDisplacement (the caller grows the table and retries).
  bool Insert(uint64_t hash, uint32_t node_ref, uint32_t offset);
  // Writer: points slot `i` at a new position of the same block.
  void Relabel(size_t i, uint32_t node_ref, uint32_t offset) {
    const uint64_t s = slots_[i].load(std::memory_order_relaxed);
    slots_[i].store(Pack(node_ref, offset, s & 0xFFFFFF), std::memory_order_release);
  }
  // Writer: removes slot `i` (backward-shift deletion, no tombstones).
  void Erase(size_t i);

  // Diagnostics (writer thread or quiescent; a full scan, never on a hot
  // path): displacement[d] = live slots d steps from their home (a hit reads
  // d + 1 slots); clusters[l] = maximal runs of l occupied slots (a miss
  // that lands in one reads the rest of it); the last bucket counts all
  // longer. Returns the tag matches on other blocks along every live
  // block's probe path: the node reads that finding each block once costs
  // beyond its own.
  uint64_t Histograms(std::vector<uint64_t>* displacement, std::vector<uint64_t>* clusters) const;

 private:
  BlockLocator(void* slots, size_t mapped_bytes, MemoryCounter* memory);
  static uint64_t Pack(uint32_t node_ref, uint32_t offset, uint64_t low24) {
    return uint64_t{node_ref} << 36 | uint64_t{offset} << 24 | low24;
  }

  std::atomic<uint64_t>* slots_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t max_used_ = 0;
  size_t mapped_bytes_ = 0;
  MemoryCounter* memory_;
};

}  // namespace kvindex::index::internal
