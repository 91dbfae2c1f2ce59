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
  // reported as allocated); anonymous pages are zero: every slot starts empty.
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

// ---------------------------------------------------------------- writer

uint32_t BlockLocator::TagAt(size_t b, uint32_t k) const {
  const uint64_t word = Line(b)[k / 8].load(std::memory_order_relaxed);
  return static_cast<uint32_t>(word >> (8 * (k % 8))) & 0xFF;
}

void BlockLocator::StoreEntry(size_t b, uint32_t k, uint64_t entry) {
  std::atomic<uint64_t>* line = Line(b);
  const uint32_t bit = kFirstEntryBit + k * kEntryBits;
  const uint32_t word = bit / 64, shift = bit % 64;
  const uint64_t lo = line[word].load(std::memory_order_relaxed);
  line[word].store((lo & ~(kEntryMask << shift)) | entry << shift, std::memory_order_relaxed);
  if (shift + kEntryBits > 64) {
    const uint32_t spill = shift + kEntryBits - 64;  // bits in the next word
    const uint64_t mask = (uint64_t{1} << spill) - 1;
    const uint64_t hi = line[word + 1].load(std::memory_order_relaxed);
    line[word + 1].store((hi & ~mask) | (entry >> (64 - shift)), std::memory_order_relaxed);
  }
}

void BlockLocator::StoreTag(size_t b, uint32_t k, uint32_t tag) {
  std::atomic<uint64_t>& word = Line(b)[k / 8];
  const uint32_t shift = 8 * (k % 8);
  const uint64_t w = word.load(std::memory_order_relaxed);
  word.store((w & ~(uint64_t{0xFF} << shift)) | uint64_t{tag} << shift, std::memory_order_relaxed);
}

// Seqlock writer: odd version, release fence, changes, even version (release).
void BlockLocator::BeginWrite(size_t b) {
  std::atomic<uint64_t>& w1 = Line(b)[1];
  const uint64_t w = w1.load(std::memory_order_relaxed);
  w1.store(w + (uint64_t{1} << kVersionShift), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void BlockLocator::EndWrite(size_t b) {
  std::atomic<uint64_t>& w1 = Line(b)[1];
  const uint64_t w = w1.load(std::memory_order_relaxed);
  const uint64_t version = ((w >> kVersionShift) + 1) & kVersionMask;
  w1.store((w & ~(kVersionMask << kVersionShift)) | version << kVersionShift,
           std::memory_order_release);
}

void BlockLocator::AddOverflow(size_t from, size_t to, int delta) {
  for (size_t b = from; b != to; b = b + 1 == buckets_ ? 0 : b + 1) {
    std::atomic<uint64_t>& w1 = Line(b)[1];
    const uint64_t w = w1.load(std::memory_order_relaxed);
    const uint64_t count = (w >> kOverflowShift) & 0xFF;
    if (count == 0xFF) continue;  // sticky: the exact count was lost
    const uint64_t next = delta > 0 ? count + 1 : count - 1;
    // Raised before the block becomes visible, lowered after it is gone: a
    // lookup never stops short of a block that is in the table.
    w1.store((w & ~(uint64_t{0xFF} << kOverflowShift)) | next << kOverflowShift,
             std::memory_order_release);
  }
}

void BlockLocator::Fill(size_t i, uint64_t hash, uint32_t node_ref, uint32_t offset) {
  const size_t b = i / kBucketSlots;
  const uint32_t k = static_cast<uint32_t>(i % kBucketSlots);
  AddOverflow(HomeBucket(hash), b, +1);
  BeginWrite(b);
  StoreEntry(b, k, uint64_t{node_ref} << 12 | offset);
  StoreTag(b, k, Tag(hash));
  EndWrite(b);
  ++used_;
}

bool BlockLocator::Insert(uint64_t hash, uint32_t node_ref, uint32_t offset) {
  // No reader sees this table: no version brackets.
  const size_t home = HomeBucket(hash);
  size_t b = home;
  for (uint32_t step = 0; step < kMaxProbeBuckets; ++step) {
    const uint32_t empties = Empties(b);
    if (empties != 0) {
      const uint32_t k = static_cast<uint32_t>(__builtin_ctz(empties));
      AddOverflow(home, b, +1);
      StoreEntry(b, k, uint64_t{node_ref} << 12 | offset);
      StoreTag(b, k, Tag(hash));
      ++used_;
      return true;
    }
    b = b + 1 == buckets_ ? 0 : b + 1;
  }
  return false;
}

void BlockLocator::Relabel(size_t i, uint32_t node_ref, uint32_t offset) {
  const size_t b = i / kBucketSlots;
  BeginWrite(b);
  StoreEntry(b, static_cast<uint32_t>(i % kBucketSlots), uint64_t{node_ref} << 12 | offset);
  EndWrite(b);
}

void BlockLocator::Erase(size_t i, uint64_t hash) {
  const size_t b = i / kBucketSlots;
  BeginWrite(b);
  StoreTag(b, static_cast<uint32_t>(i % kBucketSlots), 0);
  EndWrite(b);
  AddOverflow(HomeBucket(hash), b, -1);
  --used_;
}

// ---------------------------------------------------------------- diagnostics

uint64_t BlockLocator::Histograms(const std::function<uint64_t(uint32_t, uint32_t)>& hash_of,
                                  std::vector<uint64_t>* displacement,
                                  std::vector<uint64_t>* clusters) const {
  displacement->assign(kMaxProbeBuckets, 0);
  clusters->assign(kMaxProbeBuckets + 1, 0);
  uint64_t false_matches = 0;
  for (size_t b = 0; b < buckets_; ++b) {
    // From home bucket b, a lookup of an absent block reads buckets up to the
    // first whose overflow count is 0.
    uint32_t lines = 1;
    for (size_t j = b; lines <= kMaxProbeBuckets &&
                       ((Line(j)[1].load(std::memory_order_relaxed) >> kOverflowShift) & 0xFF) != 0;
         j = j + 1 == buckets_ ? 0 : j + 1) {
      ++lines;
    }
    ++(*clusters)[std::min<size_t>(lines, kMaxProbeBuckets)];
    for (uint32_t k = 0; k < kBucketSlots; ++k) {
      const uint32_t tag = TagAt(b, k);
      if (tag == 0) continue;
      const uint64_t entry = EntryOf(Line(b), k);
      const size_t home = HomeBucket(
          hash_of(static_cast<uint32_t>(entry >> 12), static_cast<uint32_t>(entry & 0xFFF)));
      const size_t d = b >= home ? b - home : b + buckets_ - home;
      ++(*displacement)[std::min<size_t>(d, kMaxProbeBuckets - 1)];
      // The other slots with its tag in the buckets its lookup reads.
      for (size_t j = home, s = 0; s <= d; ++s, j = j + 1 == buckets_ ? 0 : j + 1) {
        uint32_t same = TagBytesEqual(Line(j)[0].load(std::memory_order_relaxed),
                                      Line(j)[1].load(std::memory_order_relaxed), tag);
        if (j == b) same &= (1u << k) - 1;  // the lookup stops at the block
        false_matches += static_cast<uint64_t>(__builtin_popcount(same));
      }
    }
  }
  return false_matches;
}

}  // namespace kvindex::index::internal
