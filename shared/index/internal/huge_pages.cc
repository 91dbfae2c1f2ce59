#include "shared/index/internal/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace kvindex::index::internal {
namespace {

constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

size_t HugePagesRoundUp(size_t bytes) {
  return RoundUp(bytes, bytes >= kHugePageBytes ? kHugePageBytes : kPage);
}

void* MapHugePages(size_t bytes) {
  const size_t size = HugePagesRoundUp(bytes);
  if (size < kHugePageBytes) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    return p;
  }
  // Map one huge page more and trim to a 2 MiB-aligned range. Mapped
  // inaccessible first: in a process under mlockall(MCL_FUTURE) (the
  // benchmark, a router locking its memory) an accessible mapping is
  // populated by mmap itself, with 4 KiB pages, before MADV_HUGEPAGE could
  // apply (measured: 0 huge pages in a 40 M-entry index). An inaccessible
  // one is not populated; mprotect populates it after the advice.
  char* base = static_cast<char*>(ReserveAligned(size, kHugePageBytes));
  if (base == nullptr) return nullptr;
  madvise(base, size, MADV_HUGEPAGE);
  if (mprotect(base, size, PROT_READ | PROT_WRITE) != 0) {
    munmap(base, size);
    return nullptr;
  }
  // Prefaulted now: a first touch later (often a reader's probe of a still
  // empty region) would zero a whole huge page, ~150 us.
  if (madvise(base, size, MADV_POPULATE_WRITE) != 0) {
    for (size_t off = 0; off < size; off += kPage) static_cast<volatile char*>(base)[off] = 0;
  }
  return base;
}

void UnmapHugePages(void* p, size_t bytes) { munmap(p, HugePagesRoundUp(bytes)); }

void* ReserveAligned(size_t bytes, size_t alignment) {
  // One alignment more than needed, trimmed to an aligned range.
  const size_t span = bytes + alignment - kPage;
  void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = RoundUp(start, alignment);
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t tail = aligned + bytes;
  if (start + span > tail) munmap(reinterpret_cast<void*>(tail), start + span - tail);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace kvindex::index::internal
