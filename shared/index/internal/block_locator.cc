#include "shared/index/internal/block_locator.h"

#include <algorithm>

#include "shared/index/internal/huge_pages.h"

namespace kvindex::index::internal {

size_t BlockLocator::MappedBytes(size_t capacity) {
  const size_t buckets = std::max<size_t>(1, (capacity + kBucketSlots - 1) / kBucketSlots);
  return HugePagesRoundUp(buckets * kBucketBytes);
}

std::unique_ptr<BlockLocator> BlockLocator::Create(size_t capacity, MemoryCounter* memory) {
  // Rounded to whole huge pages (the rounding is used as capacity and
  // reported as allocated); anonymous pages are zero: every slot starts free.
  const size_t bytes = MappedBytes(capacity);
  void* slots = MapHugePages(bytes);
  if (slots == nullptr) return nullptr;
  return std::unique_ptr<BlockLocator>(new BlockLocator(slots, bytes, memory));
}

BlockLocator::BlockLocator(void* slots, size_t mapped_bytes, MemoryCounter* memory)
    : words_(static_cast<std::atomic<uint64_t>*>(slots)),
      buckets_(mapped_bytes / kBucketBytes),
      capacity_(buckets_ * kBucketSlots),
      max_used_(static_cast<size_t>(static_cast<double>(capacity_) * kMaxLoad)),
      mapped_bytes_(mapped_bytes),
      memory_(memory) {
  memory_->Add(mapped_bytes_);
}

BlockLocator::~BlockLocator() {
  UnmapHugePages(words_, mapped_bytes_);
  memory_->Sub(mapped_bytes_);
}

bool BlockLocator::Insert(uint64_t hash, uint32_t node_ref, uint32_t offset) {
  // No reader sees this table: no version brackets.
  size_t b = HomeBucket(hash);
  for (uint32_t d = 0; d <= kMaxDisplacement; ++d, b = Next(b)) {
    const uint32_t free_slots = FreeSlots(b);
    if (free_slots != 0) {
      StoreSlot(b, static_cast<uint32_t>(__builtin_ctz(free_slots)), Tag(hash), d,
                PackEntry(node_ref, offset));
      ++used_;
      return true;
    }
  }
  return false;
}

void BlockLocator::Erase(size_t i) {
  size_t hole = i / kBucketSlots;
  uint32_t hole_slot = static_cast<uint32_t>(i % kBucketSlots);
  // A bucket that had room already ends every probe that reaches it: no
  // block past it has its home at or before it, so nothing moves.
  const bool was_full = FreeSlots(hole) == 0;
  BeginWrite(hole);
  StoreField(hole, 8 * hole_slot, 8, 0);
  EndWrite(hole);
  --used_;
  if (!was_full) return;
  // Refill the hole with a block from the following full buckets whose home
  // is at or before it, and repeat for the hole that leaves (when its bucket
  // was full). A bucket with room ends the search.
  size_t b = hole;
  for (uint32_t dist = 1; dist <= kMaxDisplacement; ++dist) {
    b = Next(b);
    const std::atomic<uint64_t>* line = Line(b);
    const uint32_t free_slots = FreeSlots(b);
    for (uint32_t m = ~free_slots & kSlotMask; m != 0; m &= m - 1) {
      const uint32_t k = static_cast<uint32_t>(__builtin_ctz(m));
      const uint32_t displacement = DisplacementOf(line, k);
      if (displacement < dist) continue;
      const bool source_was_full = free_slots == 0;
      // Into the hole first, out of its slot second: briefly in both, which
      // a reader tolerates; a reader between the two buckets may miss it.
      BeginWrite(hole);
      StoreSlot(hole, hole_slot, TagAt(b, k), displacement - dist, EntryOf(line, k));
      EndWrite(hole);
      BeginWrite(b);
      StoreField(b, 8 * k, 8, 0);
      EndWrite(b);
      if (!source_was_full) return;
      hole = b;
      hole_slot = k;
      dist = 0;
      break;
    }
    if (dist != 0 && free_slots != 0) break;
  }
}

// ---------------------------------------------------------------- diagnostics

uint64_t BlockLocator::Histograms(std::vector<uint64_t>* displacement,
                                  std::vector<uint64_t>* clusters) const {
  displacement->assign(kMaxDisplacement + 1, 0);
  clusters->assign(kMaxDisplacement + 2, 0);
  uint64_t false_matches = 0;
  for (size_t b = 0; b < buckets_; ++b) {
    // From home bucket b, a lookup of an absent block reads buckets up to the
    // first with a free slot.
    uint32_t lines = 1;
    for (size_t j = b; lines <= kMaxDisplacement && FreeSlots(j) == 0; j = Next(j)) ++lines;
    ++(*clusters)[lines];
    const std::atomic<uint64_t>* line = Line(b);
    for (uint32_t k = 0; k < kBucketSlots; ++k) {
      const uint32_t tag = TagAt(b, k);
      if (tag == 0) continue;
      const uint32_t d = DisplacementOf(line, k);
      ++(*displacement)[d];
      // The other slots with its tag in the buckets its lookup reads before
      // it (in its own bucket: the slots before it).
      size_t j = b + buckets_ - d;
      if (j >= buckets_) j -= buckets_;
      for (uint32_t s = 0; s <= d; ++s, j = Next(j)) {
        uint32_t same = TagBytesEqual(Line(j)[0].load(std::memory_order_relaxed),
                                      Line(j)[1].load(std::memory_order_relaxed), tag);
        if (j == b) same &= (1u << k) - 1;
        false_matches += static_cast<uint64_t>(__builtin_popcount(same));
      }
    }
  }
  return false_matches;
}

}  // namespace kvindex::index::internal
