// NodeDirectory: compact node ids -> ChainNode pointers.
//
// The block locator stores a 28-bit node id per block instead of a pointer so
// a slot stays 8 bytes. Ids index a two-level array (1,024 chunks of 262,144
// entries, each one huge page, allocated on first use), so a lookup is two dependent loads of
// mostly cached memory and the array never moves (readers need no grace
// period for it). Id 0 is never handed out: a locator slot of 0 is empty.
//
// Thread safety: Allocate/Publish/Clear/Release from the single writer; Get
// from any thread. An id is released only after a grace period, so a reader
// holding a stale id still finds the (retired, not yet freed) node.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared/index/internal/chain_node.h"
#include "shared/index/internal/huge_pages.h"
#include "shared/index/internal/memory.h"

namespace kvindex::index::internal {

class NodeDirectory {
 public:
  static constexpr uint32_t kIdBits = 28;
  static constexpr uint32_t kChunkBits = 18;  // a chunk is one 2 MiB huge page
  static constexpr uint32_t kChunkSize = uint32_t{1} << kChunkBits;
  static constexpr uint32_t kChunks = uint32_t{1} << (kIdBits - kChunkBits);

  explicit NodeDirectory(MemoryCounter* memory)
      : memory_(memory), chunks_(new std::atomic<std::atomic<ChainNode*>*>[kChunks]) {
    for (uint32_t c = 0; c < kChunks; ++c) chunks_[c].store(nullptr, std::memory_order_relaxed);
    memory_->Add(kChunks * sizeof(void*));
  }
  ~NodeDirectory() {
    for (uint32_t c = 0; c < kChunks; ++c) {
      if (auto* chunk = chunks_[c].load(std::memory_order_relaxed)) {
        UnmapHugePages(chunk, kChunkSize * sizeof(void*));
        memory_->Sub(kChunkSize * sizeof(void*));
      }
    }
    memory_->Sub(kChunks * sizeof(void*));
  }
  NodeDirectory(const NodeDirectory&) = delete;
  NodeDirectory& operator=(const NodeDirectory&) = delete;

  const ChainNode* Get(uint32_t id) const {
    return chunks_[id >> kChunkBits].load(std::memory_order_acquire)[id & (kChunkSize - 1)].load(
        std::memory_order_acquire);
  }
  ChainNode* GetMutable(uint32_t id) {
    return chunks_[id >> kChunkBits].load(std::memory_order_relaxed)[id & (kChunkSize - 1)].load(
        std::memory_order_relaxed);
  }

  // Writer: a fresh id (0 when all 2^28 - 1 are in use).
  uint32_t Allocate() {
    if (!free_.empty()) {
      const uint32_t id = free_.back();
      free_.pop_back();
      return id;
    }
    if (limit_ + 1 >= (uint64_t{1} << kIdBits)) return 0;
    const uint32_t id = ++limit_;
    if (chunks_[id >> kChunkBits].load(std::memory_order_relaxed) == nullptr) {
      // Zeroed pages: every entry starts null.
      auto* chunk = static_cast<std::atomic<ChainNode*>*>(MapHugePages(kChunkSize * sizeof(void*)));
      memory_->Add(kChunkSize * sizeof(void*));
      chunks_[id >> kChunkBits].store(chunk, std::memory_order_release);
    }
    return id;
  }
  // Writer: the node is complete; readers may follow its id from now on.
  void Publish(uint32_t id, ChainNode* node) { Slot(id).store(node, std::memory_order_release); }
  // Writer, after a grace period: the id may be handed out again.
  void Release(uint32_t id) {
    Slot(id).store(nullptr, std::memory_order_relaxed);
    free_.push_back(id);
  }

  // Writer: visits every published node (live or retired).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t id = 1; id <= limit_; ++id) {
      const ChainNode* node =
          chunks_[id >> kChunkBits].load(std::memory_order_relaxed)[id & (kChunkSize - 1)].load(
              std::memory_order_relaxed);
      if (node != nullptr) fn(const_cast<ChainNode*>(node));
    }
  }

 private:
  std::atomic<ChainNode*>& Slot(uint32_t id) {
    return chunks_[id >> kChunkBits].load(std::memory_order_relaxed)[id & (kChunkSize - 1)];
  }

  MemoryCounter* memory_;
  std::unique_ptr<std::atomic<std::atomic<ChainNode*>*>[]> chunks_;
  uint32_t limit_ = 0;  // highest id handed out
  std::vector<uint32_t, CountingAllocator<uint32_t>> free_{CountingAllocator<uint32_t>(memory_)};
};

}  // namespace kvindex::index::internal
