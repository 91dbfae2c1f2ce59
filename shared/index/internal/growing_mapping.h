// GrowingMapping: address space reserved up front and committed from its
// start as it is used, so a structure that readers index without a lock (a
// table whose entries never move) costs memory in proportion to what it
// holds, not to its maximum size.
//
// The range is mapped inaccessible (no memory, no commit charge); Commit
// makes a longer prefix readable and writable and prefaults it (also under
// mlockall(MCL_FUTURE), where the mprotect itself populates it). The bytes
// committed are reported to a MemoryCounter. Failure is a value: Reserve and
// Commit return false and change nothing.
//
// GrowingArray<T>: a GrowingMapping holding T[max], whose first size()
// elements are constructed.
//
// Thread safety: Reserve/Commit/EnsureSize from one writer. Any thread may
// read an element the writer constructed and published (with release)
// before; committed memory never moves or shrinks until destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class GrowingMapping {
 public:
  GrowingMapping() = default;
  ~GrowingMapping();
  GrowingMapping(const GrowingMapping&) = delete;
  GrowingMapping& operator=(const GrowingMapping&) = delete;

  // Reserves `bytes` (rounded up to 4 KiB) at an address aligned to
  // `alignment` (a power of two); nothing committed. False when no address
  // space is left. Once per object.
  bool Reserve(size_t bytes, size_t alignment, MemoryCounter* memory);
  // Makes at least the first `bytes` (at most reserved()) usable, zeroed:
  // whole pages, and at least twice what was committed, so n commits cost
  // O(log n) system calls. False (nothing changed) when the kernel refuses.
  bool Commit(size_t bytes);

  char* data() const { return base_; }
  size_t committed() const { return committed_; }
  size_t reserved() const { return reserved_; }

 private:
  char* base_ = nullptr;
  size_t reserved_ = 0;
  size_t committed_ = 0;
  MemoryCounter* memory_ = nullptr;
};

template <typename T>
class GrowingArray {
 public:
  GrowingArray() = default;
  ~GrowingArray() {
    for (size_t i = 0; i < size_; ++i) std::destroy_at(data() + i);
  }
  GrowingArray(const GrowingArray&) = delete;
  GrowingArray& operator=(const GrowingArray&) = delete;

  // Room for `max` elements, none constructed. False without address space.
  bool Reserve(size_t max, MemoryCounter* memory) {
    return mapping_.Reserve(max * sizeof(T), alignof(T), memory);
  }
  // Elements [size(), n) value-constructed (n at most the reserved count).
  // False (nothing changed) when their memory cannot be committed.
  bool EnsureSize(size_t n) {
    if (n <= size_) return true;
    if (n * sizeof(T) > mapping_.committed() && !mapping_.Commit(n * sizeof(T))) return false;
    for (; size_ < n; ++size_) std::construct_at(data() + size_);
    return true;
  }
  size_t size() const { return size_; }
  T& operator[](size_t i) const { return data()[i]; }

 private:
  T* data() const { return reinterpret_cast<T*>(mapping_.data()); }

  GrowingMapping mapping_;
  size_t size_ = 0;  // writer only
};

}  // namespace kvindex::index::internal
