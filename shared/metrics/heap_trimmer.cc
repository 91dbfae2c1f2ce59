#include "shared/metrics/heap_trimmer.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KVINDEX_FOREIGN_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define KVINDEX_FOREIGN_ALLOCATOR 1
#endif
#endif

// glibc's allocator is the one in use: mallinfo2 and malloc_trim mean something.
#if defined(__GLIBC__) && !defined(KVINDEX_FOREIGN_ALLOCATOR)
#define KVINDEX_GLIBC_HEAP 1
#endif

namespace kvindex::metrics {
namespace {}  // namespace

uint64_t HeapTrimmer::ResidentBytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int read = std::fscanf(file, "%llu %llu", &size, &resident);
  std::fclose(file);
  if (read != 2) return 0;
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

namespace {

// Heap bytes handed out and not freed (small chunks and mmapped ones).
uint64_t HeapInUse() {
#if defined(KVINDEX_GLIBC_HEAP)
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
#else
  return 0;
#endif
}

}  // namespace

bool HeapTrimmer::Supported() {
#if defined(KVINDEX_GLIBC_HEAP)
  return true;
#else
  return false;
#endif
}

HeapTrimmer::HeapTrimmer(HeapTrimmerOptions options, prometheus::Registry* registry,
                         std::string prefix)
    : options_(options) {
  if (registry == nullptr) return;
  trims_counter_ = &prometheus::BuildCounter()
                        .Name(prefix + "_heap_trims_total")
                        .Help(
                            "Times free heap was returned to the operating system "
                            "(malloc_trim), after a burst left it held")
                        .Register(*registry)
                        .Add({});
  trimmed_counter_ = &prometheus::BuildCounter()
                          .Name(prefix + "_heap_trimmed_bytes_total")
                          .Help("Resident bytes those trims returned")
                          .Register(*registry)
                          .Add({});
}

HeapTrimmer::~HeapTrimmer() { Stop(); }

void HeapTrimmer::Start() {
  if (!Supported() || thread_.joinable()) return;
  stop_.Reset();
  thread_ = std::thread([this] { Run(); });
}

void HeapTrimmer::Stop() {
  if (!thread_.joinable()) return;
  stop_.Raise();
  thread_.join();
}

void HeapTrimmer::Run() {
  while (!stop_.WaitFor(options_.interval)) CheckOnce();
}

bool HeapTrimmer::CheckOnce() {
  if (!Supported()) return false;
  MutexLock lock(&mu_);
  const uint64_t resident = ResidentBytes();
  const uint64_t in_use = HeapInUse();
  if (resident == 0) return false;
  const uint64_t excess = resident > in_use ? resident - in_use : 0;
  const uint64_t bound = std::max<uint64_t>(
      options_.min_excess_bytes, static_cast<uint64_t>(options_.min_excess_fraction * in_use));
  if (excess <= floor_ || excess - floor_ <= bound) {
    floor_ = std::min(floor_, excess);  // what was not heap shrank (threads ended)
    return false;
  }
#if defined(KVINDEX_GLIBC_HEAP)
  malloc_trim(0);
#endif
  const uint64_t after = ResidentBytes();
  const uint64_t after_in_use = HeapInUse();
  const uint64_t returned = after < resident ? resident - after : 0;
  floor_ = after > after_in_use ? after - after_in_use : 0;
  trims_.fetch_add(1, std::memory_order_relaxed);
  trimmed_bytes_.fetch_add(returned, std::memory_order_relaxed);
  if (trims_counter_ != nullptr) trims_counter_->Increment();
  if (trimmed_counter_ != nullptr) trimmed_counter_->Increment(static_cast<double>(returned));
  return true;
}

}  // namespace kvindex::metrics
