#include "shared/metrics/heap_trimmer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvindex::metrics {
namespace {

constexpr size_t kChunk = 32 << 10;  // below glibc's mmap threshold: heap, not a mapping
constexpr size_t kBurst = 96 << 20;

TEST(HeapTrimmerTest, ReturnsWhatABurstLeftAndThenStaysQuiet) {
  if (!HeapTrimmer::Supported()) GTEST_SKIP() << "not glibc's allocator (sanitizer build)";
  HeapTrimmerOptions options;
  options.min_excess_bytes = 16 << 20;
  HeapTrimmer trimmer(options, nullptr, "test");
  trimmer.CheckOnce();  // whatever the test binary held before: learn the floor
  const uint64_t trims_before = trimmer.trims();
  const uint64_t trimmed_before = trimmer.trimmed_bytes();

  // A burst (messages buffered while catching up), then a small block that
  // stays allocated above it, so free() alone cannot shrink the heap's top.
  std::vector<void*> burst;
  for (size_t n = 0; n < kBurst / kChunk; ++n) {
    void* p = std::malloc(kChunk);
    ASSERT_NE(p, nullptr);
    std::memset(p, 0x5a, kChunk);  // resident
    burst.push_back(p);
  }
  void* pin = std::malloc(64);
  std::memset(pin, 1, 64);
  const uint64_t with_burst = HeapTrimmer::ResidentBytes();
  for (void* p : burst) std::free(p);
  const uint64_t freed = HeapTrimmer::ResidentBytes();
  // glibc keeps the freed burst resident: that is what the trimmer is for.
  ASSERT_GT(freed + (kBurst / 2), with_burst);

  EXPECT_TRUE(trimmer.CheckOnce());
  EXPECT_GE(trimmer.trimmed_bytes() - trimmed_before, kBurst / 2);
  EXPECT_LT(HeapTrimmer::ResidentBytes() + kBurst / 2, freed);
  // Nothing new held: the next rounds do not trim again.
  EXPECT_FALSE(trimmer.CheckOnce());
  EXPECT_FALSE(trimmer.CheckOnce());
  EXPECT_EQ(trimmer.trims(), trims_before + 1);
  std::free(pin);
}

TEST(HeapTrimmerTest, HeapInUseIsNotTrimmedAway) {
  if (!HeapTrimmer::Supported()) GTEST_SKIP() << "not glibc's allocator (sanitizer build)";
  HeapTrimmerOptions options;
  options.min_excess_bytes = 16 << 20;
  HeapTrimmer trimmer(options, nullptr, "test");
  trimmer.CheckOnce();
  std::vector<void*> live;
  for (size_t n = 0; n < kBurst / kChunk; ++n) {
    void* p = std::malloc(kChunk);
    std::memset(p, 0x5a, kChunk);
    live.push_back(p);
  }
  // All of it in use: nothing to return, no trim.
  EXPECT_FALSE(trimmer.CheckOnce());
  for (void* p : live) EXPECT_EQ(static_cast<unsigned char*>(p)[kChunk - 1], 0x5a);
  for (void* p : live) std::free(p);
}

}  // namespace
}  // namespace kvindex::metrics
