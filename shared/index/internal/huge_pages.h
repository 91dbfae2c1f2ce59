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

}  // namespace kvindex::index::internal
