#include "shared/index/internal/block_locator.h"

#include <algorithm>

#include "shared/index/internal/huge_pages.h"

namespace kvindex::index::internal {

size_t BlockLocator::MappedBytes(size_t capacity) {
  return HugePagesRoundUp((capacity < 64 ? 64 : capacity) * sizeof(uint64_t));
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
    : slots_(static_cast<std::atomic<uint64_t>*>(slots)),
      capacity_(mapped_bytes / sizeof(uint64_t)),
      max_used_(static_cast<size_t>(static_cast<double>(capacity_) * kMaxLoad)),
      mapped_bytes_(mapped_bytes),
      memory_(memory) {
  memory_->Add(mapped_bytes_);
}

BlockLocator::~BlockLocator() {
  UnmapHugePages(slots_, mapped_bytes_);
  memory_->Sub(mapped_bytes_);
}

bool BlockLocator::Insert(uint64_t hash, uint32_t node_ref, uint32_t offset) {
  size_t i = Home(hash);
  for (uint32_t d = 0; d <= kMaxDisplacement; ++d) {
    if (slots_[i].load(std::memory_order_relaxed) == 0) {
      slots_[i].store(Pack(node_ref, offset, uint64_t{d} << 16 | (hash & 0xFFFF)),
                      std::memory_order_release);
      ++used_;
      return true;
    }
    i = i + 1 == capacity_ ? 0 : i + 1;
  }
  return false;
}

void BlockLocator::Erase(size_t i) {
  size_t hole = i;
  size_t j = i;
  for (uint32_t dist = 1;; ++dist) {
    j = j + 1 == capacity_ ? 0 : j + 1;
    const uint64_t s = slots_[j].load(std::memory_order_relaxed);
    if (s == 0) break;
    const uint32_t disp = static_cast<uint32_t>(s >> 16) & 0xFF;
    if (disp >= dist) {
      // Its home is at or before the hole: move it back (it is briefly in
      // both slots, which a reader tolerates).
      const uint64_t moved = (s & ~uint64_t{0xFF0000}) | uint64_t{disp - dist} << 16;
      slots_[hole].store(moved, std::memory_order_release);
      hole = j;
      dist = 0;
    }
  }
  slots_[hole].store(0, std::memory_order_release);
  --used_;
}

uint64_t BlockLocator::Histograms(std::vector<uint64_t>* displacement,
                                  std::vector<uint64_t>* clusters) const {
  displacement->assign(kMaxDisplacement + 1, 0);
  clusters->assign(1025, 0);
  // Start after an empty slot so no cluster is split by the wrap-around.
  size_t start = 0;
  while (start < capacity_ && slots_[start].load(std::memory_order_relaxed) != 0) ++start;
  if (start == capacity_) return 0;  // never: the load stays below 1
  uint64_t false_matches = 0;
  size_t run = 0;
  for (size_t k = 1; k <= capacity_; ++k) {
    const size_t j = (start + k) % capacity_;
    const uint64_t s = slots_[j].load(std::memory_order_relaxed);
    if (s != 0) {
      const uint32_t d = (s >> 16) & 0xFF;
      ++(*displacement)[d];
      for (uint32_t back = 1; back <= d; ++back) {
        const uint64_t o =
            slots_[(j + capacity_ - back) % capacity_].load(std::memory_order_relaxed);
        false_matches += (o & 0xFFFF) == (s & 0xFFFF);
      }
      ++run;
    } else if (run != 0) {
      ++(*clusters)[std::min(run, clusters->size() - 1)];
      run = 0;
    }
  }
  return false_matches;
}

}  // namespace kvindex::index::internal
