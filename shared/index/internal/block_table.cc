#include "shared/index/internal/block_table.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace kvindex::index::internal {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

BlockTable::BlockTable(size_t capacity, MemoryCounter* memory)
    : capacity_(capacity < 8 ? 8 : capacity), memory_(memory) {
  const size_t bytes = capacity_ * sizeof(Slot);
  // Large tables are rounded to whole huge pages: the TLB reach is what makes
  // random probes cheap, and the rounding is reported as allocated.
  mapped_bytes_ = RoundUp(bytes, bytes >= kHugePage ? kHugePage : kPage);
  void* p =
      mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  if (mapped_bytes_ >= kHugePage) madvise(p, mapped_bytes_, MADV_HUGEPAGE);
  // Anonymous pages are zero: every slot starts empty (word == 0).
  slots_ = static_cast<Slot*>(p);
  // Capacity may use the rounding slack for free.
  capacity_ = mapped_bytes_ / sizeof(Slot);
  lines_ = capacity_ / kSlotsPerLine;
  max_used_ = static_cast<size_t>(static_cast<double>(capacity_) * kMaxLoad);
  memory_->Add(mapped_bytes_);
}

BlockTable::~BlockTable() {
  munmap(slots_, mapped_bytes_);
  memory_->Sub(mapped_bytes_);
}

bool BlockTable::SetHolder(uint64_t hash, uint64_t tag, uint64_t bit) {
  for (size_t i = Home(hash);; i = Next(i)) {
    Slot& s = slots_[i];
    const uint64_t word = s.word.load(std::memory_order_relaxed);
    if (word == 0) {
      // Key first, word last (release): a reader that sees the word sees the key.
      s.key.store(hash, std::memory_order_relaxed);
      s.word.store(tag | bit, std::memory_order_release);
      ++used_;
      return true;
    }
    if ((word & ~kHolderMask) == tag && s.key.load(std::memory_order_relaxed) == hash) {
      if (word & bit) return false;
      s.word.store(word | bit, std::memory_order_release);
      return true;
    }
  }
}

bool BlockTable::ClearHolder(uint64_t hash, uint64_t tag, uint64_t bit) {
  for (size_t i = Home(hash);; i = Next(i)) {
    Slot& s = slots_[i];
    const uint64_t word = s.word.load(std::memory_order_relaxed);
    if (word == 0) return false;
    if ((word & ~kHolderMask) == tag && s.key.load(std::memory_order_relaxed) == hash) {
      if (!(word & bit)) return false;
      const uint64_t left = word & ~bit;
      MarkLine(i);
      if (left & kHolderMask) {
        s.word.store(left, std::memory_order_relaxed);
      } else {
        DeleteAt(i);
      }
      return true;
    }
  }
}

void BlockTable::InsertFresh(uint64_t hash, uint64_t word) {
  size_t i = Home(hash);
  while (slots_[i].word.load(std::memory_order_relaxed) != 0) i = Next(i);
  slots_[i].key.store(hash, std::memory_order_relaxed);
  slots_[i].word.store(word, std::memory_order_relaxed);
  ++used_;
}

// Backward-shift deletion keeps runs gap-free without tombstones, so churn
// (the steady state of an LRU-evicting cluster) never degrades probe length.
void BlockTable::DeleteAt(size_t hole) {
  size_t j = hole;
  for (;;) {
    j = Next(j);
    const uint64_t word = slots_[j].word.load(std::memory_order_relaxed);
    if (word == 0) break;
    const uint64_t key = slots_[j].key.load(std::memory_order_relaxed);
    const size_t home = Home(key);
    // Slot j may move into the hole only if its home is not in (hole, j].
    const size_t dist_home = (j + capacity_ - home) % capacity_;
    const size_t dist_hole = (j + capacity_ - hole) % capacity_;
    if (dist_home >= dist_hole) {
      MarkLine(hole);
      slots_[hole].key.store(key, std::memory_order_relaxed);
      slots_[hole].word.store(word, std::memory_order_relaxed);
      hole = j;
    }
  }
  MarkLine(hole);
  slots_[hole].word.store(0, std::memory_order_relaxed);
  slots_[hole].key.store(0, std::memory_order_relaxed);
  --used_;
}

}  // namespace kvindex::index::internal
