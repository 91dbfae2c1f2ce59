#include "shared/index/internal/growing_mapping.h"

#include <sys/mman.h>

#include <algorithm>

namespace kvindex::index::internal {
namespace {

constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

GrowingMapping::~GrowingMapping() {
  if (base_ == nullptr) return;
  munmap(base_, reserved_);
  memory_->Sub(committed_);
}

bool GrowingMapping::Reserve(size_t bytes, size_t alignment, MemoryCounter* memory) {
  const size_t size = RoundUp(std::max<size_t>(bytes, 1), kPage);
  alignment = std::max(alignment, kPage);
  // One alignment more than needed, trimmed to an aligned range.
  const size_t span = size + alignment - kPage;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, alignment);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t tail = aligned + size;
  if (start + span > tail) munmap(reinterpret_cast<void*>(tail), start + span - tail);
  base_ = reinterpret_cast<char*>(aligned);
  reserved_ = size;
  memory_ = memory;
  return true;
}

bool GrowingMapping::Commit(size_t bytes) {
  if (bytes <= committed_) return true;
  if (bytes > reserved_) return false;
  const size_t target = std::min(reserved_, RoundUp(std::max(bytes, 2 * committed_), kPage));
  char* from = base_ + committed_;
  const size_t grow = target - committed_;
  if (mprotect(from, grow, PROT_READ | PROT_WRITE) != 0) return false;
  // Prefaulted now rather than by a first touch inside a write burst.
  if (madvise(from, grow, MADV_POPULATE_WRITE) != 0) {
    for (size_t off = 0; off < grow; off += kPage) static_cast<volatile char*>(from)[off] = 0;
  }
  memory_->Add(grow);
  committed_ = target;
  return true;
}

}  // namespace kvindex::index::internal
