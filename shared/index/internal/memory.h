// Byte accounting for the index: every structure the index owns allocates
// through a MemoryCounter, so IndexStats::bytes_allocated reports bytes
// actually requested from the system (mapped table pages, container storage),
// not size()*sizeof estimates.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvindex::index::internal {

class MemoryCounter {
 public:
  void Add(size_t bytes) { bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void Sub(size_t bytes) { bytes_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> bytes_{0};
};

// std-compatible allocator that reports to a MemoryCounter.
template <typename T>
class CountingAllocator {
 public:
  using value_type = T;
  explicit CountingAllocator(MemoryCounter* counter) : counter_(counter) {}
  template <typename U>
  CountingAllocator(const CountingAllocator<U>& other) : counter_(other.counter()) {}  // NOLINT

  T* allocate(size_t n) {
    counter_->Add(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    counter_->Sub(n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  MemoryCounter* counter() const { return counter_; }

  template <typename U>
  bool operator==(const CountingAllocator<U>& other) const {
    return counter_ == other.counter();
  }

 private:
  MemoryCounter* counter_;
};

}  // namespace kvindex::index::internal
