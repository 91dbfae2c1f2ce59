// NodeArena: size classes, alignment, references, reuse and byte accounting.
#include "shared/index/internal/node_arena.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "shared/index/internal/huge_pages.h"

namespace kvindex::index::internal {
namespace {

// AnonHugePages (kB) of the mapping that holds `p`, from /proc/self/smaps.
uint64_t AnonHugeKb(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    const size_t dash = line.find('-');
    if (dash != std::string::npos && dash < line.find(' ')) {
      const uintptr_t lo = std::strtoull(line.c_str(), nullptr, 16);
      const uintptr_t hi = std::strtoull(line.c_str() + dash + 1, nullptr, 16);
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtoull(line.c_str() + 14, nullptr, 10);
    }
  }
  return 0;
}

// Huge pages also in a process under mlockall(MCL_FUTURE) (kvindex-bench
// does that), where mmap populates an accessible mapping itself, with 4 KiB
// pages, before any advice. Skipped where THP is off or locking is refused.
TEST(HugePagesTest, HugeEvenUnderMlockall) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(thp, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) GTEST_SKIP() << "THP off";
  if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) GTEST_SKIP() << "mlockall refused";
  const size_t bytes = 8 * kHugePageBytes;
  void* p = MapHugePages(bytes);
  const uint64_t huge_kb = p != nullptr ? AnonHugeKb(p) : 0;
  if (p != nullptr) UnmapHugePages(p, bytes);
  munlockall();
  ASSERT_NE(p, nullptr);
  // Most of it (a huge page the kernel cannot assemble falls back to small ones).
  EXPECT_GE(huge_kb, 4 * 2048u);
}

TEST(NodeArenaTest, ClassesCoverRequestsWithBoundedRounding) {
  for (size_t bytes = 1; bytes <= 40000; bytes += 7) {
    const size_t cls = NodeArena::ClassBytes(bytes);
    ASSERT_GE(cls, bytes);
    ASSERT_EQ(cls % 64, 0u);
    // Exact up to 8 units, then at most one eighth above the 64-byte units.
    const size_t units = (bytes + 63) / 64;
    ASSERT_LE(cls / 64, units <= 8 ? units : units + units / 8 + 1) << bytes;
    ASSERT_EQ(NodeArena::ClassBytes(cls), cls);  // a class size is its own class
  }
}

TEST(NodeArenaTest, BlocksAreAlignedDisjointResolvableAndReusedByClass) {
  MemoryCounter memory;
  {
    NodeArena arena(&memory);
    const uint64_t table = memory.bytes();  // the chunk table
    std::set<uintptr_t> seen;
    size_t bytes = 0;
    NodeArena::Ref first_ref = 0;
    void* first = arena.Allocate(1000, &bytes, &first_ref);
    EXPECT_EQ(bytes, NodeArena::ClassBytes(1000));
    EXPECT_EQ(arena.Resolve(first_ref), first);
    EXPECT_NE(first_ref, 0u);
    // Enough blocks to span several 2 MiB chunks.
    for (int i = 0; i < 2000; ++i) {
      size_t b = 0;
      NodeArena::Ref ref = 0;
      void* p = arena.Allocate(64 + i * 40, &b, &ref);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
      EXPECT_EQ(arena.Resolve(ref), p);
      EXPECT_LT(ref, uint32_t{1} << 27);
      EXPECT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second);
    }
    EXPECT_GT(memory.bytes() - table, NodeArena::kChunkBytes);
    EXPECT_EQ((memory.bytes() - table) % NodeArena::kChunkBytes, 0u);  // whole chunks
    arena.Free(first, bytes);
    const uint64_t mapped = memory.bytes();  // chunks + the free-list heads
    size_t again_bytes = 0;
    NodeArena::Ref again_ref = 0;
    EXPECT_EQ(arena.Allocate(990, &again_bytes, &again_ref), first);  // same class: reused
    EXPECT_EQ(again_ref, first_ref);
    EXPECT_EQ(again_bytes, bytes);
    EXPECT_EQ(memory.bytes(), mapped);
  }
  EXPECT_EQ(memory.bytes(), 0u);
}

TEST(NodeArenaTest, ExhaustionIsAValueNotAnException) {
  MemoryCounter memory;
  NodeArena arena(&memory, /*max_chunks=*/2);
  const uint64_t table = memory.bytes();
  size_t bytes = 0;
  NodeArena::Ref ref = 0;
  std::vector<void*> blocks;
  // A limit below max_chunks stops at its own count.
  while (void* p = arena.Allocate(64 << 10, &bytes, &ref, /*chunk_limit=*/1)) blocks.push_back(p);
  EXPECT_EQ(memory.bytes() - table, NodeArena::kChunkBytes);
  EXPECT_EQ(arena.mapped_bytes(), NodeArena::kChunkBytes);
  const size_t per_chunk = blocks.size();
  EXPECT_GE(per_chunk, 25u);
  // The hard limit holds whatever the caller asks.
  while (void* p = arena.Allocate(64 << 10, &bytes, &ref, /*chunk_limit=*/100)) {
    blocks.push_back(p);
  }
  EXPECT_EQ(blocks.size(), 2 * per_chunk);
  EXPECT_EQ(memory.bytes() - table, 2 * NodeArena::kChunkBytes);
  // A freed block is reused without a new chunk.
  arena.Free(blocks.back(), bytes);
  EXPECT_EQ(arena.Allocate(64 << 10, &bytes, &ref), blocks.back());
  EXPECT_EQ(arena.Allocate(64 << 10, &bytes, &ref), nullptr);
}

TEST(NodeArenaTest, InjectedFailuresSkipThenFail) {
  MemoryCounter memory;
  NodeArena arena(&memory);
  size_t bytes = 0;
  NodeArena::Ref ref = 0;
  arena.FailAllocationsForTesting(/*skip=*/1, /*n=*/2);
  EXPECT_NE(arena.Allocate(100, &bytes, &ref), nullptr);
  EXPECT_EQ(arena.Allocate(100, &bytes, &ref), nullptr);
  EXPECT_EQ(arena.Allocate(100, &bytes, &ref), nullptr);
  EXPECT_NE(arena.Allocate(100, &bytes, &ref), nullptr);
}

}  // namespace
}  // namespace kvindex::index::internal
