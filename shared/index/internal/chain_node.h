// ChainNode: consecutive blocks of one chain that share one holder set.
//
// A node stores the sequence hashes of a run of blocks in order (each block
// the chain child of the one before it, as a stored event lists them) and, once
// for the whole run, which sources hold those blocks in which tier. A query
// that reaches a node by one hash-table probe then matches the following
// blocks by comparing contiguous hashes, so it touches about one cache line per
// eight blocks instead of one per block.
//
// Layout (one block of the model's NodeArena, 64-byte aligned): the header with the first
// holder group (one cache line), `capacity` hashes, then holder groups 1..n-1
// (a model with more than 64 sources).
//
// Thread safety: the single writer mutates; readers read concurrently and
// validate with `version` (a seqlock per node, see model_index.h):
// - hashes are written before the node is published and never change after;
// - a holder bit is set with a release store and no bracket (insertions only
//   add to what a reader may see);
// - clearing a holder bit and shrinking [begin, end) happen inside a version
//   bracket (odd while in progress), so a reader that read the node before
//   such a change fails its validation and retries;
// - while a checkpoint capture runs, the writer preserves a node's holders
//   and extent before its first change, and records each node it frees
//   (model_capture.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "shared/model/tier.h"

namespace kvindex::index::internal {

inline constexpr int kGroupBits = 64;                             // source ids per holder group
inline constexpr uint32_t kMaxGroups = 64;                        // groups per model
inline constexpr uint32_t kMaxSources = kGroupBits * kMaxGroups;  // ids per model
static_assert(kMaxSources <= 4096, "match rows pack a rank and a row index in 12 bits each");
// A node holds at most this many blocks (offsets fit the locator's 12 bits);
// longer runs are split over several nodes.
inline constexpr uint32_t kMaxNodeBlocks = 4096;

struct HolderGroup {
  uint32_t group = 0;  // source ids group * 64 .. group * 64 + 63
  // group(0) only: the node's capture generation (ChainNode::capture).
  mutable std::atomic<uint32_t> capture{0};
  std::atomic<uint64_t> tiers[kNumTiers] =
      {};  // bit i: source (group*64+i) holds the run in tier t

  uint64_t Any() const {
    uint64_t any = 0;
    for (const auto& t : tiers) any |= t.load(std::memory_order_relaxed);
    return any;
  }
};
static_assert(sizeof(HolderGroup) == 40);

struct ChainNode {
  std::atomic<uint32_t> version{0};  // odd while a bracket modifies the node
  std::atomic<uint32_t> begin{0};    // live blocks are hashes()[begin, end)
  std::atomic<uint32_t> end{0};
  uint16_t capacity = 0;    // <= kMaxNodeBlocks
  uint16_t num_groups = 0;  // <= kMaxGroups
  uint32_t ref = 0;         // NodeArena reference: what locator slots store
  uint32_t index = 0;       // writer only: position in the model's node list
  HolderGroup first_group;  // group(0); further groups follow the hashes

  // The last checkpoint capture that took this node's contents as they were
  // when it began (model_capture.h): set by whichever of the capture's reader
  // and the writer (which preserves the node before changing it) comes first.
  std::atomic<uint32_t>& capture() const { return first_group.capture; }

  // Hashes sit at a fixed offset, so a reader loads the header line and the
  // hash it checks in parallel, not one after the other.
  uint64_t* hashes() { return reinterpret_cast<uint64_t*>(this + 1); }
  const uint64_t* hashes() const { return reinterpret_cast<const uint64_t*>(this + 1); }
  HolderGroup& group(uint32_t g) {
    return g == 0 ? first_group : reinterpret_cast<HolderGroup*>(hashes() + capacity)[g - 1];
  }
  const HolderGroup& group(uint32_t g) const {
    return g == 0 ? first_group : reinterpret_cast<const HolderGroup*>(hashes() + capacity)[g - 1];
  }

  HolderGroup* FindGroup(uint32_t group_index) {
    for (uint32_t g = 0; g < num_groups; ++g) {
      if (group(g).group == group_index) return &group(g);
    }
    return nullptr;
  }
  uint32_t size() const {
    return end.load(std::memory_order_relaxed) - begin.load(std::memory_order_relaxed);
  }

  static size_t Bytes(uint32_t num_groups, uint32_t capacity) {
    const size_t raw = sizeof(ChainNode) + capacity * 8 + (num_groups - 1) * sizeof(HolderGroup);
    return (raw + 63) / 64 * 64;
  }
  // Constructs a node in `memory` (at least Bytes(num_groups, capacity), 64-byte aligned).
  static ChainNode* Create(void* memory, uint32_t ref, uint32_t num_groups, uint32_t capacity) {
    auto* node = new (memory) ChainNode;
    node->ref = ref;
    node->num_groups = static_cast<uint16_t>(num_groups);
    node->capacity = static_cast<uint16_t>(capacity);
    for (uint32_t g = 1; g < num_groups; ++g) new (&node->group(g)) HolderGroup;
    return node;
  }
  static void Destroy(ChainNode* node) { node->~ChainNode(); }

  // Writer: a version bracket around changes a reader must not combine with
  // what it read before them.
  void BeginWrite() {
    version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void EndWrite() {
    version.store(version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
};
static_assert(sizeof(ChainNode) == 64);

}  // namespace kvindex::index::internal
