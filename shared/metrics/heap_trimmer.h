// HeapTrimmer: gives freed heap back to the operating system when a process
// holds much more than it uses.
//
// glibc keeps what a burst freed (a router catching up after a partition
// buffers hundreds of ~150 KB JetStream messages in the NATS client's arena)
// as free heap inside the process: measured 40 MB of a router's 118 MB RSS
// after a long soak (docs/reliability.md, finding 5). Every `interval` this
// compares the resident set with the heap in use and, when the difference
// has grown past the bounds since the last trim, calls malloc_trim(0), which
// releases free pages in every arena. The resident part that is not heap
// (code, stacks, mapped files) is learnt as the floor after each trim, so a
// process that holds no free heap is never trimmed again and again.
//
// Without glibc's allocator (sanitizer builds) it reports and does nothing.
//
//   HeapTrimmer trimmer({}, registry.get(), "kvindex_router");
//   trimmer.Start();   // a thread of its own
//   ...
//   trimmer.Stop();
//
// Thread safety: Start/Stop from one controlling thread; CheckOnce and the
// metrics from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "shared/base/mutex.h"
#include "shared/base/stop_signal.h"

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace kvindex::metrics {

struct HeapTrimmerOptions {
  std::chrono::milliseconds interval{std::chrono::seconds(10)};
  // Trim when the resident memory beyond the heap in use exceeds the floor
  // by this much, and by this fraction of the heap in use.
  uint64_t min_excess_bytes = 32ull << 20;
  double min_excess_fraction = 0.25;
};

class HeapTrimmer {
 public:
  // `registry` may be null (no metrics); `prefix` names them
  // (<prefix>_heap_trims_total, <prefix>_heap_trimmed_bytes_total).
  HeapTrimmer(HeapTrimmerOptions options, prometheus::Registry* registry, std::string prefix);
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

  void Start();
  void Stop();

  // One round: true when it trimmed. Safe to call while the thread runs.
  bool CheckOnce();

  // False where the allocator is not glibc's (sanitizers): nothing to trim.
  static bool Supported();
  // This process's resident set (/proc/self/statm), 0 when unreadable.
  static uint64_t ResidentBytes();

  uint64_t trims() const { return trims_.load(std::memory_order_relaxed); }
  uint64_t trimmed_bytes() const { return trimmed_bytes_.load(std::memory_order_relaxed); }

 private:
  void Run();

  const HeapTrimmerOptions options_;
  Mutex mu_;  // one round at a time
  // Resident bytes that are not heap in use, right after the last trim
  // (0 before the first: the first round over the bounds trims).
  uint64_t floor_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> trims_{0};
  std::atomic<uint64_t> trimmed_bytes_{0};
  prometheus::Counter* trims_counter_ = nullptr;  // owned by the registry
  prometheus::Counter* trimmed_counter_ = nullptr;
  StopSignal stop_;
  std::thread thread_;
};

}  // namespace kvindex::metrics
