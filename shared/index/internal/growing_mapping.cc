#include "shared/index/internal/growing_mapping.h"

#include <sys/mman.h>

#include <algorithm>

#include "shared/index/internal/huge_pages.h"

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
  base_ = static_cast<char*>(ReserveAligned(size, alignment));
  if (base_ == nullptr) return false;
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
