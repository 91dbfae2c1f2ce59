// NodeArena: memory for one model's chain nodes, on 2 MiB huge pages.
//
// Nodes are read at random by every lookup; on 4 KiB pages each of those
// reads also walks the page tables (measured: lookups 15 % slower at p50).
// The arena maps 2 MiB chunks (huge pages advised, prefaulted) and hands out
// blocks in size classes of 64-byte units, eight classes per doubling (at most
// 12.5 % rounding); a freed block goes to its class's free list and is reused
// for the next node of that class. Chunks are never returned: the footprint is
// the peak, reported as allocated. A block is named by a 27-bit reference
// (chunk, unit), which the block locator stores instead of a pointer.
//
// A small model costs what it holds: the first chunk is committed as it fills
// (4 KiB pages, doubling; huge pages advised once it is full) and the chunk
// table as chunks are added, so a model with one node holds a few KiB, not a
// prefaulted 2 MiB. The limits still count whole chunks (mapped_bytes), so
// what fits under them does not change.
//
// Exhaustion is a value, not an exception: Allocate returns nullptr (and
// changes nothing) when the block would need a chunk beyond the caller's
// limit or beyond max_chunks, or when mapping one fails, so the model index
// can refuse a store or skip a split without leaving a half-applied event.
//
// Thread safety: writer only. Blocks are freed after the model's grace period,
// so readers never see a block reused under them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/index/internal/growing_mapping.h"
#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class NodeArena {
 public:
  static constexpr size_t kChunkBytes = size_t{2} << 20;  // one huge page
  static constexpr size_t kUnit = 64;
  static constexpr uint32_t kUnitBits = 15;     // 2^15 units of 64 bytes per chunk
  static constexpr uint32_t kMaxChunks = 4096;  // refs fit 27 bits: 8 GiB of nodes
  // A block's reference: chunk index << kUnitBits | unit within the chunk.
  // Never 0 (unit 0 of every chunk holds the chunk's index).
  using Ref = uint32_t;

  // `max_chunks` (at most kMaxChunks) is lowered by tests to reach the hard
  // limit quickly.
  explicit NodeArena(MemoryCounter* memory, uint32_t max_chunks = kMaxChunks);
  ~NodeArena();
  NodeArena(const NodeArena&) = delete;
  NodeArena& operator=(const NodeArena&) = delete;

  // 64-byte aligned; *bytes receives the block's size (>= requested), *ref
  // its reference. nullptr when the block needs a new chunk while the arena
  // holds min(chunk_limit, max_chunks()) chunks, or when the mapping fails.
  void* Allocate(size_t requested, size_t* bytes, Ref* ref, uint32_t chunk_limit = kMaxChunks);
  void Free(void* block, size_t bytes);

  uint32_t max_chunks() const { return max_chunks_; }
  // Chunks started, as whole chunks: what the limits count (never shrinks).
  size_t mapped_bytes() const { return size_t{num_chunks_} * kChunkBytes; }
  // Testing: after `skip` more calls, the next `n` Allocate calls fail as if
  // the arena were full.
  void FailAllocationsForTesting(uint32_t skip, uint32_t n) {
    fail_skip_ = skip;
    fail_next_ = n;
  }

  // Any thread: the block `ref` names (its chunk is never unmapped while the
  // arena lives). One load from a small, hot table, no directory.
  void* Resolve(Ref ref) const {
    return chunk_bases_[ref >> kUnitBits].load(std::memory_order_acquire) +
           size_t{ref & ((1u << kUnitBits) - 1)} * kUnit;
  }

  // The class size (bytes) a request of `requested` bytes gets.
  static size_t ClassBytes(size_t requested);

 private:
  static size_t ClassOf(size_t units);
  static size_t UnitsOf(size_t cls);
  Ref RefOf(const void* block) const;
  // Room for a block of `bytes` at next_: more of the first chunk committed,
  // or a new chunk (within `chunk_limit`).
  bool Grow(size_t bytes, uint32_t chunk_limit);
  bool NewChunk(size_t bytes);

  MemoryCounter* memory_;
  uint32_t max_chunks_;
  uint32_t fail_skip_ = 0;
  uint32_t fail_next_ = 0;
  // Chunk index -> base, committed as chunks are added.
  GrowingArray<std::atomic<char*>> chunk_bases_;
  GrowingMapping first_chunk_;  // chunk 0, committed as it fills
  uint32_t num_chunks_ = 0;
  char* next_ = nullptr;  // bump pointer in the newest chunk
  char* end_ = nullptr;
  // Per class: head of an intrusive list through the freed blocks.
  std::vector<void*, CountingAllocator<void*>> free_{CountingAllocator<void*>(memory_)};
};

}  // namespace kvindex::index::internal
