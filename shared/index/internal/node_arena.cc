#include "shared/index/internal/node_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "shared/index/internal/huge_pages.h"

namespace kvindex::index::internal {

NodeArena::NodeArena(MemoryCounter* memory, uint32_t max_chunks)
    : memory_(memory), max_chunks_(std::min(max_chunks, kMaxChunks)) {
  // Without memory for its table the arena holds no chunk: every Allocate
  // fails. The table's first page (512 chunks) is committed up front.
  if (!chunk_bases_.Reserve(max_chunks_, memory_) || !chunk_bases_.EnsureSize(1)) max_chunks_ = 0;
}

NodeArena::~NodeArena() {
  // Chunk 0 is first_chunk_'s.
  for (uint32_t c = 1; c < num_chunks_; ++c) {
    UnmapHugePages(chunk_bases_[c].load(std::memory_order_relaxed), kChunkBytes);
    memory_->Sub(kChunkBytes);
  }
}

// Classes of 64-byte units: 1..2^S exactly, then 2^S per doubling
// (2^b + k * 2^(b-S) for k = 1..2^S).
constexpr size_t kStepBits = 3;
constexpr size_t kSteps = size_t{1} << kStepBits;

size_t NodeArena::ClassOf(size_t units) {
  if (units <= kSteps) return units - 1;
  const size_t b = std::bit_width(units - 1) - 1;  // 2^b < units <= 2^(b+1)
  const size_t step = size_t{1} << (b - kStepBits);
  const size_t k = (units - (size_t{1} << b) + step - 1) / step;
  return kSteps + (b - kStepBits) * kSteps + (k - 1);
}

size_t NodeArena::UnitsOf(size_t cls) {
  if (cls < kSteps) return cls + 1;
  const size_t b = kStepBits + (cls - kSteps) / kSteps;
  const size_t k = (cls - kSteps) % kSteps + 1;
  return (size_t{1} << b) + k * (size_t{1} << (b - kStepBits));
}

size_t NodeArena::ClassBytes(size_t requested) {
  const size_t units = (requested + kUnit - 1) / kUnit;
  return UnitsOf(ClassOf(units)) * kUnit;
}

bool NodeArena::Grow(size_t bytes, uint32_t chunk_limit) {
  if (num_chunks_ == 1 && first_chunk_.committed() < kChunkBytes) {
    const size_t need = static_cast<size_t>(next_ - first_chunk_.data()) + bytes;
    if (need <= kChunkBytes) {
      if (!first_chunk_.Commit(need)) return false;
      end_ = first_chunk_.data() + first_chunk_.committed();
      // Full: from now on it is read like the others (khugepaged may
      // collapse it into a huge page).
      if (first_chunk_.committed() == kChunkBytes) {
        madvise(first_chunk_.data(), kChunkBytes, MADV_HUGEPAGE);
      }
      return true;
    }
  }
  return num_chunks_ < std::min(chunk_limit, max_chunks_) && NewChunk(bytes);
}

bool NodeArena::NewChunk(size_t bytes) {
  if (!chunk_bases_.EnsureSize(num_chunks_ + 1)) return false;
  char* chunk;
  if (num_chunks_ == 0) {
    // 4 KiB pages while it fills: a huge page would be 2 MiB from the
    // first node on.
    if (first_chunk_.data() == nullptr) {
      if (!first_chunk_.Reserve(kChunkBytes, kChunkBytes, memory_)) return false;
      madvise(first_chunk_.data(), kChunkBytes, MADV_NOHUGEPAGE);
    }
    if (!first_chunk_.Commit(kUnit + bytes)) return false;
    chunk = first_chunk_.data();
    end_ = chunk + first_chunk_.committed();
  } else {
    chunk = static_cast<char*>(MapHugePages(kChunkBytes));
    if (chunk == nullptr) return false;
    memory_->Add(kChunkBytes);
    end_ = chunk + kChunkBytes;
  }
  // Unit 0 records the chunk's index, so a freed block's reference is found
  // from its address (chunks are 2 MiB-aligned).
  *reinterpret_cast<uint32_t*>(chunk) = num_chunks_;
  chunk_bases_[num_chunks_++].store(chunk, std::memory_order_release);
  next_ = chunk + kUnit;
  return true;
}

NodeArena::Ref NodeArena::RefOf(const void* block) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(block);
  const uintptr_t base = address & ~(uintptr_t{kChunkBytes} - 1);
  const uint32_t chunk = *reinterpret_cast<const uint32_t*>(base);
  return chunk << kUnitBits | static_cast<uint32_t>((address - base) / kUnit);
}

void* NodeArena::Allocate(size_t requested, size_t* bytes, Ref* ref, uint32_t chunk_limit) {
  if (fail_next_ != 0) [[unlikely]] {
    if (fail_skip_ == 0) {
      --fail_next_;
      return nullptr;
    }
    --fail_skip_;
  }
  const size_t cls = ClassOf((requested + kUnit - 1) / kUnit);
  *bytes = UnitsOf(cls) * kUnit;
  void* block;
  if (cls < free_.size() && free_[cls] != nullptr) {
    block = free_[cls];
    free_[cls] = *static_cast<void**>(block);
  } else {
    // The rest of a chunk too small for this block is left unused (< 2 %).
    if (next_ == nullptr || static_cast<size_t>(end_ - next_) < *bytes) {
      if (!Grow(*bytes, chunk_limit)) return nullptr;
    }
    block = next_;
    next_ += *bytes;
  }
  *ref = RefOf(block);
  return block;
}

void NodeArena::Free(void* block, size_t bytes) {
  const size_t cls = ClassOf(bytes / kUnit);
  if (free_.size() <= cls) free_.resize(cls + 1, nullptr);
  *static_cast<void**>(block) = free_[cls];
  free_[cls] = block;
}

}  // namespace kvindex::index::internal
