// Reader/writer synchronization of one model's index (README.md,
// "Concurrency").
//
// Per-node versions (ChainNode::version) are the fine-grained seqlock: a
// reader records each node's version in a NodeReadLog and revalidates them at
// the end, so it retries only when a bracket touched a node it read.
//
// RemovalSeqlock: a global sequence for source-id frees (Begin/End), plus
// `fallback_mu_`, which the writer holds inside every removal and id free. A
// reader that failed a few optimistic attempts takes the mutex and so waits
// for at most one bracket, never for a whole long write. Insertions are not
// bracketed: a reader whose reads overlapped only insertions observed a
// subset of the final state, never more.
//
// (Safe freeing of what readers may still hold: grace_period.h.)
//
// Thread safety: Begin/End/LockRemovals/UnlockRemovals from the single writer
// thread; the rest from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "shared/base/mutex.h"

namespace kvindex::index::internal {

class RemovalSeqlock {
 public:
  // Writer: removals inside nodes (validated per node) only exclude fallback
  // readers.
  void LockRemovals() ABSL_EXCLUSIVE_LOCK_FUNCTION(fallback_mu_) { fallback_mu_.Lock(); }
  void UnlockRemovals() ABSL_UNLOCK_FUNCTION(fallback_mu_) { fallback_mu_.Unlock(); }
  // Writer: table swaps and source-id frees (validated globally).
  void Begin() ABSL_EXCLUSIVE_LOCK_FUNCTION(fallback_mu_) {
    fallback_mu_.Lock();
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void End() ABSL_UNLOCK_FUNCTION(fallback_mu_) {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    fallback_mu_.Unlock();
  }
  // Reader: returns the sequence to validate against; odd = removal running.
  uint64_t ReadBegin() const { return seq_.load(std::memory_order_acquire); }
  bool ReadValidate(uint64_t begin) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return (begin & 1) == 0 && seq_.load(std::memory_order_relaxed) == begin;
  }

  // Reader fallback: while held, no removal runs. The writer holds it only
  // for one removal run or bracket, so spinning first usually wins it.
  void LockFallback(int spins) const ABSL_EXCLUSIVE_LOCK_FUNCTION(fallback_mu_) {
    fallback_mu_.LockSpinning(spins);
  }
  void UnlockFallback() const ABSL_UNLOCK_FUNCTION(fallback_mu_) { fallback_mu_.Unlock(); }

 private:
  // Held by the writer inside every bracket; a reader holding it sees no removal.
  mutable Mutex fallback_mu_;
  alignas(64) std::atomic<uint64_t> seq_{0};
};

// The nodes one optimistic read used, with the version each had when read,
// to revalidate at its end: a read fails only when a bracket touched one of
// its own nodes, not whenever any removal ran meanwhile.
struct NodeReadLog {
  std::vector<std::pair<const std::atomic<uint32_t>*, uint32_t>> versions;
  bool conflict = false;  // a node was being modified, or a slot was stale
  void Clear() {
    versions.clear();
    conflict = false;
  }
  // After an acquire fence (RemovalSeqlock::ReadValidate issues one).
  bool Unchanged() const {
    for (const auto& [version, seen] : versions) {
      if (version->load(std::memory_order_relaxed) != seen) return false;
    }
    return true;
  }
};

}  // namespace kvindex::index::internal
