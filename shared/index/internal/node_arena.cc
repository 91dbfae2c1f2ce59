#include "shared/index/internal/node_arena.h"

#include <bit>
#include <cstdint>
#include <new>

#include "shared/index/internal/huge_pages.h"

namespace kvindex::index::internal {

NodeArena::~NodeArena() {
  for (void* chunk : chunks_) {
    UnmapHugePages(chunk, kChunkBytes);
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

void NodeArena::NewChunk() {
  char* chunk = static_cast<char*>(MapHugePages(kChunkBytes));
  chunks_.push_back(chunk);
  memory_->Add(kChunkBytes);
  next_ = chunk;
  end_ = chunk + kChunkBytes;
}

void* NodeArena::Allocate(size_t requested, size_t* bytes) {
  const size_t cls = ClassOf((requested + kUnit - 1) / kUnit);
  *bytes = UnitsOf(cls) * kUnit;
  if (cls < free_.size() && free_[cls] != nullptr) {
    void* block = free_[cls];
    free_[cls] = *static_cast<void**>(block);
    return block;
  }
  // The rest of a chunk too small for this block is left unused (< 2 %).
  if (next_ == nullptr || static_cast<size_t>(end_ - next_) < *bytes) NewChunk();
  void* block = next_;
  next_ += *bytes;
  return block;
}

void NodeArena::Free(void* block, size_t bytes) {
  const size_t cls = ClassOf(bytes / kUnit);
  if (free_.size() <= cls) free_.resize(cls + 1, nullptr);
  *static_cast<void**>(block) = free_[cls];
  free_[cls] = block;
}

}  // namespace kvindex::index::internal
