// NodeArena: size classes, alignment, references, reuse and byte accounting.
#include "shared/index/internal/node_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace kvindex::index::internal {
namespace {

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
