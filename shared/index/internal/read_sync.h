// Reader/writer synchronization of one model's index (README.md,
// "Concurrency").
//
// LineVersions: a seqlock per stripe of table lines. The writer marks every
// line a removal writes (odd) before writing it and releases the marks (even)
// at the end of the removal bracket; a reader records each line's version
// before reading it (ReadLog) and revalidates them at the end, so it retries
// only when a removal touched a line it read.
//
// RemovalSeqlock: a global sequence for table swaps and source-id frees
// (Begin/End), plus `fallback_mu`, which the writer holds inside every
// removal bracket and swap. A reader that failed a few optimistic attempts
// takes the mutex and so waits for at most one bracket, never for a whole
// long write. Insertions are not bracketed: a reader whose reads overlapped
// only insertions observed a subset of the final state, never more.
//
// GracePeriod: readers Enter/Exit around every use of the published table
// pointer; after unpublishing a table the writer calls Synchronize, which
// returns once no reader can still hold the old pointer, then frees it.
//
// Thread safety: Begin/End/LockRemovals/UnlockRemovals/Mark/Release/
// Synchronize from the single writer thread; the rest from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvindex::index::internal {

class RemovalSeqlock {
 public:
  // Writer: removals inside the table (validated per line, see LineVersions)
  // only exclude fallback readers.
  void LockRemovals() { fallback_mu.lock(); }
  void UnlockRemovals() { fallback_mu.unlock(); }
  // Writer: table swaps and source-id frees (validated globally).
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

// Per-line versions (a seqlock per stripe of table lines): a removal bumps
// the version of every line it writes to odd before the first write and back
// to even at the end of its bracket, so a reader revalidates only the lines it
// read. A long query then fails only when a removal touched one of its own
// lines, not whenever any removal ran during it.
class LineVersions {
 public:
  static constexpr size_t kStripes = size_t{1} << 16;
  static constexpr size_t kBytes = kStripes * sizeof(uint32_t);

  LineVersions() : v_(new std::atomic<uint32_t>[kStripes]) {
    for (size_t i = 0; i < kStripes; ++i) v_[i].store(0, std::memory_order_relaxed);
  }

  // Writer, inside a removal bracket, before the first write to `line`.
  void Mark(size_t line) {
    const size_t s = line & (kStripes - 1);
    const uint32_t cur = v_[s].load(std::memory_order_relaxed);
    if (cur & 1) return;  // already marked in this bracket (single writer)
    v_[s].store(cur + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    marked_.push_back(static_cast<uint32_t>(s));
  }
  // Writer, at the end of the bracket.
  void Release() {
    for (uint32_t s : marked_) {
      v_[s].store(v_[s].load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    marked_.clear();
  }

  // Reader: version before reading `line` (odd = being modified).
  uint32_t Read(size_t line) const {
    return v_[line & (kStripes - 1)].load(std::memory_order_acquire);
  }
  // Reader, after an acquire fence: true if `line` is still at `seen`.
  bool Unchanged(size_t line, uint32_t seen) const {
    return v_[line & (kStripes - 1)].load(std::memory_order_relaxed) == seen;
  }

 private:
  std::unique_ptr<std::atomic<uint32_t>[]> v_;
  std::vector<uint32_t> marked_;
};

// The lines one optimistic read saw, to revalidate at its end.
struct ReadLog {
  std::vector<uint64_t> entries;  // line << 32 | version
  bool conflict = false;          // a line was being modified when read
  void Clear() {
    entries.clear();
    conflict = false;
  }
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
