// Anonymous memory for the index's large, randomly read structures (the
// block locator and the node arena): mapped 2 MiB-aligned, huge pages
// advised, and prefaulted, so lookups neither walk 4 KiB page tables nor meet
// a first-touch fault that zeroes 2 MiB inside a query.
#pragma once

#include <cstddef>

namespace kvindex::index::internal {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole huge pages when at least one, else to 4 KiB.
size_t HugePagesRoundUp(size_t bytes);
// Zeroed, populated memory of HugePagesRoundUp(bytes) bytes; nullptr when the
// mapping fails (callers fail closed: the index must not stop applying the
// log halfway through an event).
void* MapHugePages(size_t bytes);
void UnmapHugePages(void* p, size_t bytes);
// `bytes` (a multiple of 4 KiB) of inaccessible address space (no memory,
// no commit charge) aligned to `alignment` (a power of two, at least 4 KiB);
// nullptr when none is left.
void* ReserveAligned(size_t bytes, size_t alignment);

}  // namespace kvindex::index::internal
