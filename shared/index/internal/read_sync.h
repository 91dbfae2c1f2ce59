// Reader/writer synchronization of one model's index: a removal seqlock and a
// grace-period counter for freeing replaced tables.
//
// RemovalSeqlock: the writer brackets every step that can make a reader
// overcount (clearing holder bits, moving slots, swapping the table) with
// Begin/End. Insertions are not bracketed: a reader whose reads overlapped
// only insertions observed a subset of the final state, never more. A reader
// records the sequence before its reads and validates it after; on a change
// it retries, and after a few failed tries it takes `fallback_mu`, which the
// writer also holds inside each bracket, so the reader waits for at most one
// bracket (a bounded chunk of removals), never for a whole long write.
//
// GracePeriod: readers Enter/Exit around every use of the published table
// pointer; after unpublishing a table the writer calls Synchronize, which
// returns once no reader can still hold the old pointer, then frees it.
//
// Thread safety: Begin/End/Synchronize from the single writer thread;
// ReadBegin/ReadValidate/Enter/Exit from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

namespace kvindex::index::internal {

class RemovalSeqlock {
 public:
  // Writer.
  void Begin() {
    fallback_mu.lock();
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void End() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    fallback_mu.unlock();
  }
  // Reader: returns the sequence to validate against; odd = removal running.
  uint64_t ReadBegin() const { return seq_.load(std::memory_order_acquire); }
  bool ReadValidate(uint64_t begin) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return (begin & 1) == 0 && seq_.load(std::memory_order_relaxed) == begin;
  }

  // Held by the writer inside every bracket; a reader holding it sees no removal.
  mutable std::mutex fallback_mu;

 private:
  alignas(64) std::atomic<uint64_t> seq_{0};
};

class GracePeriod {
 public:
  uint32_t Enter() const {
    for (;;) {
      const uint32_t phase = phase_.load(std::memory_order_seq_cst);
      readers_[phase].n.fetch_add(1, std::memory_order_seq_cst);
      if (phase_.load(std::memory_order_seq_cst) == phase) return phase;
      readers_[phase].n.fetch_sub(1, std::memory_order_release);
    }
  }
  void Exit(uint32_t phase) const { readers_[phase].n.fetch_sub(1, std::memory_order_release); }

  // Writer, after the old pointer is no longer reachable from the index.
  void Synchronize() {
    for (int round = 0; round < 2; ++round) {
      const uint32_t old = phase_.load(std::memory_order_relaxed);
      phase_.store(old ^ 1, std::memory_order_seq_cst);
      while (readers_[old].n.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    }
  }

 private:
  struct alignas(64) Counter {
    std::atomic<int64_t> n{0};
  };
  mutable std::atomic<uint32_t> phase_{0};
  mutable Counter readers_[2];
};

}  // namespace kvindex::index::internal
