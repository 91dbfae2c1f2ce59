// BlockLocator: sequence hash -> (node reference, offset) of the block in its ChainNode.
//
// Linear probing over buckets of one cache line, nine blocks each:
//
//   bits   0-71    nine 8-bit tags (a few bits of the hash; 0 = free slot)
//   bits  72-95    version (24 bits, odd while the writer changes the bucket)
//   bits  96-149   nine 6-bit displacements (buckets from the block's home)
//   bits 152-511   nine 40-bit entries: node reference (28 bits) | offset (12)
//
// A block goes to the first free slot from its home bucket on; a lookup reads
// buckets from home until the block or a bucket with a free slot. Erasing
// keeps that rule exact without tombstones: the hole is refilled from the
// following full buckets by a block whose home is at or before it (the
// bucket-wise backward shift of linear probing, found from the stored
// displacements without reading any hash). So the table keeps the shape of
// one built afresh however much it churns, and at up to 85% load a lookup
// reads one line in most cases: 7.1 bytes of slot per 0.585-0.85 blocks
// (docs/benchmarks.md, "Index at scale").
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
// the writer changes a bucket inside its version bracket and a reader
// retries a bucket whose version moved, so a reader never uses a torn entry.
// Only Erase moves blocks (back towards their home); a reader racing it may
// miss a block (the model index looks once more when an erase ran during
// the lookup; a miss can only undercount).
#pragma once

#include <emmintrin.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class BlockLocator {
 public:
  static constexpr uint32_t kBucketSlots = 9;
  static constexpr size_t kBucketBytes = 64;
  // Grow past kMaxLoad, to kGrowLoad (x1.45).
  static constexpr double kMaxLoad = 0.85;
  static constexpr double kGrowLoad = 0.585;
  // The displacement field's range: a block that would sit further from its
  // home makes the probe fail (the caller grows the table).
  static constexpr uint32_t kMaxDisplacement = 63;
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
  static constexpr uint32_t kRefBits = 28;
  static constexpr uint32_t kOffsetBits = 12;
  static uint32_t NodeRef(uint64_t slot) {
    return static_cast<uint32_t>(slot >> (24 + kOffsetBits));
  }
  static uint32_t Offset(uint64_t slot) {
    return static_cast<uint32_t>(slot >> 24) & ((1u << kOffsetBits) - 1);
  }

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
  // The home line and the next: a full home bucket sends the probe (and an
  // erase's refill) on.
  void PrefetchForWrite(uint64_t hash) const {
    const size_t home = HomeBucket(hash);
    __builtin_prefetch(Line(home), 1, 1);
    __builtin_prefetch(Line(Next(home)), 1, 1);
  }

  // Writer: the slot holding `hash` (its value in *slot), else the free slot
  // where it would go (*slot = 0); kNotFound when that is further than
  // kMaxDisplacement buckets from home. `is_block(node_ref, offset)` says
  // whether that node position holds `hash`.
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
  // be absent. False when its slot would exceed kMaxDisplacement.
  bool Insert(uint64_t hash, uint32_t node_ref, uint32_t offset);
  // Writer: points slot `i` at a new position of the same block.
  void Relabel(size_t i, uint32_t node_ref, uint32_t offset);
  // Writer: frees slot `i`, then refills the hole from the buckets after it.
  void Erase(size_t i);

  // Diagnostics (writer thread or quiescent; a full scan, never on a hot
  // path): displacement[d] = blocks d buckets past their home bucket (a hit
  // reads d + 1 lines); clusters[l] = home buckets from which a lookup of an
  // absent block reads l lines (the last entry counts all longer). Returns
  // the tag matches on other blocks in the buckets each live block's lookup
  // reads before reaching it: the node reads that finding each block once
  // costs beyond its own.
  uint64_t Histograms(std::vector<uint64_t>* displacement, std::vector<uint64_t>* clusters) const;

 private:
  static constexpr int kVersionShift = 8;  // in word 1
  static constexpr uint64_t kVersionMask = 0xFFFFFF;
  static constexpr uint32_t kFirstDisplacementBit = 96;
  static constexpr uint32_t kDisplacementBits = 6;
  static constexpr uint32_t kFirstEntryBit = 152;
  static constexpr uint32_t kEntryBits = 40;
  static_assert(kRefBits + kOffsetBits == kEntryBits);
  static constexpr uint64_t kEntryMask = (uint64_t{1} << kEntryBits) - 1;
  static constexpr uint32_t kSlotMask = (1u << kBucketSlots) - 1;

  BlockLocator(void* slots, size_t mapped_bytes, MemoryCounter* memory);

  // Tags 1-255, from the low bits of the hash (HomeBucket uses the high bits
  // of its product).
  static uint32_t Tag(uint64_t hash) {
    const uint32_t t = static_cast<uint32_t>(hash & 0xFF);
    return t == 0 ? 1 : t;
  }
  std::atomic<uint64_t>* Line(size_t b) const { return words_ + b * 8; }
  size_t Next(size_t b) const { return b + 1 == buckets_ ? 0 : b + 1; }
  size_t Distance(size_t from, size_t to) const {
    return to >= from ? to - from : to + buckets_ - from;
  }

  // Bit k set where byte k (k < 9) of the words (lo, hi) equals `value`.
  static uint32_t TagBytesEqual(uint64_t lo, uint64_t hi, uint32_t value) {
    const __m128i tags = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
    const __m128i eq = _mm_cmpeq_epi8(tags, _mm_set1_epi8(static_cast<char>(value)));
    return static_cast<uint32_t>(_mm_movemask_epi8(eq)) & kSlotMask;
  }
  static uint64_t Version(uint64_t word1) { return (word1 >> kVersionShift) & kVersionMask; }

  // The `bits`-wide field at bit `at` of a line (it may span two words).
  static uint64_t Field(const std::atomic<uint64_t>* line, uint32_t at, uint32_t bits) {
    // Branch-free (see StoreField); bits from a word read twice fall
    // outside the mask.
    const uint32_t word = at / 64, shift = at % 64;
    const uint32_t next = shift + bits > 64 ? word + 1 : word;
    const uint64_t lo = line[word].load(std::memory_order_relaxed);
    const uint64_t hi = line[next].load(std::memory_order_relaxed);
    return ((lo >> shift) | ((hi << 1) << (63 - shift))) & ((uint64_t{1} << bits) - 1);
  }
  // An entry: node reference (kRefBits) | offset (kOffsetBits). Each field is
  // cut to its width, so a value out of range can never spill into the other
  // field or a neighbouring slot (the model index asserts at compile time
  // that arena references and node offsets fit).
  static uint64_t PackEntry(uint32_t node_ref, uint32_t offset) {
    return (uint64_t{node_ref} & ((uint64_t{1} << kRefBits) - 1)) << kOffsetBits |
           (offset & ((1u << kOffsetBits) - 1));
  }
  static uint64_t EntryOf(const std::atomic<uint64_t>* line, uint32_t k) {
    return Field(line, kFirstEntryBit + k * kEntryBits, kEntryBits);
  }
  static uint32_t DisplacementOf(const std::atomic<uint64_t>* line, uint32_t k) {
    return static_cast<uint32_t>(
        Field(line, kFirstDisplacementBit + k * kDisplacementBits, kDisplacementBits));
  }

  // kReader: validates every entry it uses against the bucket's version
  // (readers run beside the writer); the writer reads its own table as it
  // left it.
  template <bool kReader, typename IsBlock>
  size_t Lookup(uint64_t hash, const IsBlock& is_block, uint64_t* slot) const {
    const uint32_t tag = Tag(hash);
    size_t b = HomeBucket(hash);
    for (uint32_t d = 0; d <= kMaxDisplacement; ++d, b = Next(b)) {
      const std::atomic<uint64_t>* line = Line(b);
      uint64_t w0, w1;
      for (;;) {
        w1 = line[1].load(kReader ? std::memory_order_acquire : std::memory_order_relaxed);
        if (kReader && (Version(w1) & 1) != 0) continue;  // being changed
        w0 = line[0].load(std::memory_order_relaxed);
        bool torn = false;
        for (uint32_t m = TagBytesEqual(w0, w1, tag); m != 0; m &= m - 1) {
          const uint32_t k = static_cast<uint32_t>(__builtin_ctz(m));
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
      const uint32_t free_slots = TagBytesEqual(w0, w1, 0);
      if (free_slots != 0) {
        // No block with a home at or before b sits past a bucket with room.
        *slot = 0;
        return kReader ? kNotFound
                       : b * kBucketSlots + static_cast<uint32_t>(__builtin_ctz(free_slots));
      }
    }
    *slot = 0;
    return kNotFound;
  }

  // Writer (no reader can see a change between two of its calls).
  uint32_t FreeSlots(size_t b) const {
    const std::atomic<uint64_t>* line = Line(b);
    return TagBytesEqual(line[0].load(std::memory_order_relaxed),
                         line[1].load(std::memory_order_relaxed), 0);
  }
  uint32_t TagAt(size_t b, uint32_t k) const {
    return static_cast<uint32_t>(Field(Line(b), 8 * k, 8));
  }
  void StoreField(size_t b, uint32_t at, uint32_t bits, uint64_t value);
  // Writes slot k of bucket b whole (tag 0 = free).
  void StoreSlot(size_t b, uint32_t k, uint32_t tag, uint32_t displacement, uint64_t entry);
  void BeginWrite(size_t b);
  void EndWrite(size_t b);

  std::atomic<uint64_t>* words_ = nullptr;
  size_t buckets_ = 0;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t max_used_ = 0;
  size_t mapped_bytes_ = 0;
  MemoryCounter* memory_;
};

// Writer paths, inline: each runs once or more per block of every event.

inline void BlockLocator::StoreField(size_t b, uint32_t at, uint32_t bits, uint64_t value) {
  // Branch-free: which slot a block takes is random, so whether its fields
  // cross a word boundary would be a mispredicted branch per store.
  std::atomic<uint64_t>* line = Line(b);
  const uint32_t word = at / 64, shift = at % 64;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  const uint64_t lo = line[word].load(std::memory_order_relaxed);
  line[word].store((lo & ~(mask << shift)) | value << shift, std::memory_order_relaxed);
  // The bits past the word (none when the field fits): in two shifts, as a
  // shift by 64 is undefined.
  const uint64_t spill_mask = (mask >> 1) >> (63 - shift);
  const uint32_t next = spill_mask != 0 ? word + 1 : word;
  const uint64_t hi = line[next].load(std::memory_order_relaxed);
  line[next].store((hi & ~spill_mask) | ((value >> 1) >> (63 - shift)), std::memory_order_relaxed);
}

inline void BlockLocator::StoreSlot(size_t b, uint32_t k, uint32_t tag, uint32_t displacement,
                                    uint64_t entry) {
  StoreField(b, kFirstEntryBit + k * kEntryBits, kEntryBits, entry);
  StoreField(b, kFirstDisplacementBit + k * kDisplacementBits, kDisplacementBits, displacement);
  StoreField(b, 8 * k, 8, tag);
}

// Seqlock writer: odd version, release fence, changes, even version (release).
inline void BlockLocator::BeginWrite(size_t b) {
  std::atomic<uint64_t>& w1 = Line(b)[1];
  w1.store(w1.load(std::memory_order_relaxed) + (uint64_t{1} << kVersionShift),
           std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

inline void BlockLocator::EndWrite(size_t b) {
  std::atomic<uint64_t>& w1 = Line(b)[1];
  const uint64_t w = w1.load(std::memory_order_relaxed);
  const uint64_t version = (Version(w) + 1) & kVersionMask;
  w1.store((w & ~(kVersionMask << kVersionShift)) | version << kVersionShift,
           std::memory_order_release);
}

inline void BlockLocator::Fill(size_t i, uint64_t hash, uint32_t node_ref, uint32_t offset) {
  const size_t b = i / kBucketSlots;
  const uint32_t displacement = static_cast<uint32_t>(Distance(HomeBucket(hash), b));
  BeginWrite(b);
  StoreSlot(b, static_cast<uint32_t>(i % kBucketSlots), Tag(hash), displacement,
            PackEntry(node_ref, offset));
  EndWrite(b);
  ++used_;
}

inline void BlockLocator::Relabel(size_t i, uint32_t node_ref, uint32_t offset) {
  const size_t b = i / kBucketSlots;
  const uint32_t k = static_cast<uint32_t>(i % kBucketSlots);
  BeginWrite(b);
  StoreField(b, kFirstEntryBit + k * kEntryBits, kEntryBits, PackEntry(node_ref, offset));
  EndWrite(b);
}

}  // namespace kvindex::index::internal
