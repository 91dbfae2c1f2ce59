// BlockLocator: sequence hash -> (node reference, offset) of the block in its ChainNode.
//
// Open addressing over buckets of one cache line, ten blocks each:
//
//   bytes  0-9   ten 8-bit tags (a few bits of the hash; 0 = empty slot)
//   byte   10    overflow count: blocks whose home bucket is this one or an
//                earlier one and that sit past it (sticky at 255)
//   bytes 11-13  version (24 bits, odd while the writer changes the bucket)
//   bytes 14-63  ten 40-bit entries: node reference (28 bits) | offset (12)
//
// A block goes to the first free slot from its home bucket on, and every
// bucket it passes counts it in its overflow count; a lookup scans buckets
// from home until the block or a bucket whose overflow count is 0. So a
// lookup reads one line in most cases, whatever the load, and the table runs
// at up to 85% load: 6.4 bytes of slot per 0.85 blocks (7.5-11 bytes per
// block between growths, docs/benchmarks.md "Index at scale"). Erasing frees
// a slot in place (no shifting) and lowers the counts its insert raised.
//
// The full hash is not stored: it already sits in the node's hash array, and a
// lookup confirms a tag match there (`is_block`). The tag makes a confirmation
// on a wrong block rare (1 in 255 per occupied slot in the buckets scanned).
//
// Storage is one anonymous mapping (huge pages advised when large), so the
// bytes reported are the bytes mapped.
//
// Thread safety: one writer (Fill/Relabel/Erase; Insert only while no reader
// can see the table); readers Find concurrently. Each bucket is a seqlock:
// the writer changes a bucket's slots inside its version bracket and a
// reader retries a bucket whose version moved, so a reader never uses a torn
// entry. Blocks never move between slots, so a reader never misses a block
// that stayed in the table during its lookup.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <emmintrin.h>

#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class BlockLocator {
 public:
  static constexpr uint32_t kBucketSlots = 10;
  static constexpr size_t kBucketBytes = 64;
  // Grow past kMaxLoad, to kGrowLoad (x1.45): a bucket of ten at 85% load
  // still holds nine blocks in ten at home (measured in docs/benchmarks.md).
  static constexpr double kMaxLoad = 0.85;
  static constexpr double kGrowLoad = 0.585;
  // A probe that finds no free slot within this many buckets fails (the
  // caller grows the table); at <= 85% load it does not happen.
  static constexpr uint32_t kMaxProbeBuckets = 64;
  static constexpr size_t kNotFound = ~size_t{0};

  // A table of at least `capacity` slots; nullptr when it cannot be mapped.
  static std::unique_ptr<BlockLocator> Create(size_t capacity, MemoryCounter* memory);
  // The bytes Create(capacity) maps: what growing to it costs.
  static size_t MappedBytes(size_t capacity);
  ~BlockLocator();
  BlockLocator(const BlockLocator&) = delete;
  BlockLocator& operator=(const BlockLocator&) = delete;

  // A slot's value as Probe/Find report it: node reference, offset and tag
  // (never 0 for an occupied slot).
  static uint32_t NodeRef(uint64_t slot) { return static_cast<uint32_t>(slot >> 36); }
  static uint32_t Offset(uint64_t slot) { return static_cast<uint32_t>(slot >> 24) & 0xFFF; }

  size_t capacity() const { return capacity_; }  // slots
  size_t used() const { return used_; }
  size_t mapped_bytes() const { return mapped_bytes_; }
  bool HasRoomFor(size_t blocks) const { return used_ + blocks <= max_used_; }
  // Blocks that fit before the table must grow.
  size_t Room() const { return max_used_ > used_ ? max_used_ - used_ : 0; }

  size_t HomeBucket(uint64_t hash) const {
    const uint64_t mixed = hash * 0x9E3779B97F4A7C15ull;
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed) * buckets_) >> 64);
  }
  void Prefetch(uint64_t hash) const { __builtin_prefetch(Line(HomeBucket(hash)), 0, 1); }
  // The home line and the next: about one block in ten overflows into it.
  void PrefetchForWrite(uint64_t hash) const {
    const size_t home = HomeBucket(hash);
    __builtin_prefetch(Line(home), 1, 1);
    __builtin_prefetch(Line(home + 1 < buckets_ ? home + 1 : 0), 1, 1);
  }

  // Writer: the slot holding `hash` (its value in *slot), else the free slot
  // where it would go (*slot = 0); kNotFound when there is none within
  // kMaxProbeBuckets. `is_block(node_ref, offset)` says whether that node
  // position holds `hash`.
  template <typename IsBlock>
  size_t Probe(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    return Lookup<false>(hash, is_block, slot);
  }

  // Any thread: the slot index of `hash` (its value, as checked, in *slot),
  // or kNotFound.
  template <typename IsBlock>
  size_t Find(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    const size_t i = Lookup<true>(hash, is_block, slot);
    return i != kNotFound && *slot != 0 ? i : kNotFound;
  }

  // Writer: fills the free slot `i` that Probe returned for `hash`.
  void Fill(size_t i, uint64_t hash, uint32_t node_ref, uint32_t offset);
  // Writer, on a table no reader sees yet (a rebuild): adds a block known to
  // be absent. False when no slot is free within kMaxProbeBuckets.
  bool Insert(uint64_t hash, uint32_t node_ref, uint32_t offset);
  // Writer: points slot `i` at a new position of the same block.
  void Relabel(size_t i, uint32_t node_ref, uint32_t offset);
  // Writer: frees slot `i`, which holds `hash`.
  void Erase(size_t i, uint64_t hash);

  // Diagnostics (writer thread or quiescent; a full scan, never on a hot
  // path): displacement[d] = blocks d buckets past their home bucket (a hit
  // reads d + 1 lines); clusters[l] = buckets from which a lookup of an
  // absent block reads l lines (the last entry counts all longer). Returns
  // the tag matches on other blocks in the buckets each live block's lookup
  // reads before reaching it: the node reads that finding each block once
  // costs beyond its own.
  // `hash_of(node_ref, offset)` is the hash at that node position.
  uint64_t Histograms(const std::function<uint64_t(uint32_t, uint32_t)>& hash_of,
                      std::vector<uint64_t>* displacement, std::vector<uint64_t>* clusters) const;

 private:
  // The words of bucket b's line; word 1 holds tags 8-9, the overflow count
  // and the version.
  static constexpr int kOverflowShift = 16;
  static constexpr int kVersionShift = 24;
  static constexpr uint64_t kVersionMask = 0xFFFFFF;
  static constexpr uint32_t kFirstEntryBit = 112;
  static constexpr uint32_t kEntryBits = 40;
  static constexpr uint64_t kEntryMask = (uint64_t{1} << kEntryBits) - 1;

  BlockLocator(void* slots, size_t mapped_bytes, MemoryCounter* memory);

  // Tags 1-255, from the low bits of the hash (HomeBucket uses the high bits
  // of its product).
  static uint32_t Tag(uint64_t hash) {
    const uint32_t t = static_cast<uint32_t>(hash & 0xFF);
    return t == 0 ? 1 : t;
  }
  std::atomic<uint64_t>* Line(size_t b) const { return words_ + b * 8; }

  // Bit k set where byte k (k < 10) of the words (lo, hi) equals `value`.
  static uint32_t TagBytesEqual(uint64_t lo, uint64_t hi, uint32_t value) {
    const __m128i tags = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
    const __m128i eq = _mm_cmpeq_epi8(tags, _mm_set1_epi8(static_cast<char>(value)));
    return static_cast<uint32_t>(_mm_movemask_epi8(eq)) & ((1u << kBucketSlots) - 1);
  }
  static uint64_t Version(uint64_t word1) { return (word1 >> kVersionShift) & kVersionMask; }

  // kReader: validates every read against the bucket's version (readers run
  // beside the writer); the writer reads its own table as it left it.
  template <bool kReader, typename IsBlock>
  size_t Lookup(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    const uint32_t tag = Tag(hash);
    size_t b = HomeBucket(hash);
    size_t free_slot = kNotFound;
    for (uint32_t step = 0; step < kMaxProbeBuckets; ++step) {
      const std::atomic<uint64_t>* line = Line(b);
      uint64_t w0, w1;
      uint32_t matches;
      for (;;) {
        w1 = line[1].load(kReader ? std::memory_order_acquire : std::memory_order_relaxed);
        if (kReader && (Version(w1) & 1) != 0) continue;  // being changed
        w0 = line[0].load(std::memory_order_relaxed);
        matches = TagBytesEqual(w0, w1, tag);
        bool torn = false;
        for (; matches != 0; matches &= matches - 1) {
          const uint32_t k = static_cast<uint32_t>(__builtin_ctz(matches));
          const uint64_t entry = EntryOf(line, k);
          if (kReader) {
            std::atomic_thread_fence(std::memory_order_acquire);
            if (Version(line[1].load(std::memory_order_relaxed)) != Version(w1)) {
              torn = true;
              break;
            }
          }
          if (is_block(static_cast<uint32_t>(entry >> 12), static_cast<uint32_t>(entry & 0xFFF))) {
            *slot = entry << 24 | tag;
            return b * kBucketSlots + k;
          }
        }
        if (!torn) break;
      }
      if (!kReader && free_slot == kNotFound) {
        const uint32_t empties = TagBytesEqual(w0, w1, 0);
        if (empties != 0)
          free_slot = b * kBucketSlots + static_cast<uint32_t>(__builtin_ctz(empties));
      }
      // A stale count read by a reader only ends its lookup early or late:
      // counts are raised before a block appears and lowered after it left.
      if (((w1 >> kOverflowShift) & 0xFF) == 0) break;
      b = b + 1 == buckets_ ? 0 : b + 1;
    }
    *slot = 0;
    if (kReader || free_slot != kNotFound) return free_slot;
    // The block is absent; a free slot further on, past the buckets read.
    for (uint32_t step = 0; step < kMaxProbeBuckets; ++step) {
      b = b + 1 == buckets_ ? 0 : b + 1;
      const uint32_t empties = Empties(b);
      if (empties != 0) return b * kBucketSlots + static_cast<uint32_t>(__builtin_ctz(empties));
    }
    return kNotFound;
  }

  static uint64_t EntryOf(const std::atomic<uint64_t>* line, uint32_t k) {
    const uint32_t bit = kFirstEntryBit + k * kEntryBits;
    const uint32_t word = bit / 64, shift = bit % 64;
    uint64_t value = line[word].load(std::memory_order_relaxed) >> shift;
    if (shift + kEntryBits > 64) {
      value |= line[word + 1].load(std::memory_order_relaxed) << (64 - shift);
    }
    return value & kEntryMask;
  }
  // Writer (no reader can see a change between two of its calls).
  uint32_t Empties(size_t b) const {
    const std::atomic<uint64_t>* line = Line(b);
    return TagBytesEqual(line[0].load(std::memory_order_relaxed),
                         line[1].load(std::memory_order_relaxed), 0);
  }
  void StoreEntry(size_t b, uint32_t k, uint64_t entry);
  void StoreTag(size_t b, uint32_t k, uint32_t tag);
  void BeginWrite(size_t b);
  void EndWrite(size_t b);
  // Raises (+1) or lowers (-1) the overflow counts of the buckets from `from`
  // up to, not including, `to`.
  void AddOverflow(size_t from, size_t to, int delta);
  uint32_t TagAt(size_t b, uint32_t k) const;

  std::atomic<uint64_t>* words_ = nullptr;
  size_t buckets_ = 0;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t max_used_ = 0;
  size_t mapped_bytes_ = 0;
  MemoryCounter* memory_;
};

}  // namespace kvindex::index::internal
