// ModelCapture: one model's part of a KvIndex capture (IndexCapture in
// index_interface.h): the model's entries as they were when the capture
// began, read on another thread while the writer goes on applying.
//
// Begin (writer, the only pause): copies the node list (one pointer per
// node) and the source names, and opens the capture under a new generation.
// The reader then takes the nodes one by one under CaptureShared::mu: it
// skips a node the writer preserved or freed, else copies its extent,
// holders and hashes and marks it taken (ChainNode::capture = generation).
// The writer, before its first change of a node not yet taken (extent or
// holder bits), preserves the node's extent and holders and marks it taken
// (ModelIndex::Preserve), and before it frees a node it records it (and
// copies the hashes of a preserved one, which it is about to free). Hashes
// never change in a live node. Nodes created after Begin carry generation + 1
// and are not in the list. So every node of Begin is read exactly once, as
// it was at Begin, and the writer waits at most for the copy of one node.
//
// Thread safety: ModelIndex::BeginCapture and the CaptureShared hooks
// (Preserve, Freeing) on the model's writer; ForEachRun and the destructor
// on any one thread. The model must outlive the capture.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "shared/base/mutex.h"
#include "shared/index/internal/chain_node.h"
#include "shared/model/source_key.h"
#include "shared/model/tier.h"

namespace kvindex::index::internal {

// What a model's writer and its open capture share (ModelIndex::capture_).
class CaptureShared {
 public:
  // Writer: the generation of nodes created now (never equal to one a
  // capture marks taken).
  uint32_t born() const { return generation_ + 1; }
  // Writer, before changing `node`'s extent or holder bits.
  void Preserve(const ChainNode* node) {
    if (!open_.load(std::memory_order_acquire)) return;
    const uint32_t seen = node->capture().load(std::memory_order_acquire);
    if (seen == generation_ || seen == born()) return;
    PreserveSlow(node);
  }
  // Writer, before freeing `nodes` (retired, unreachable for readers).
  void Freeing(std::span<ChainNode* const> nodes) {
    if (open_.load(std::memory_order_acquire)) FreeingSlow(nodes);
  }
  // Writer: true while a capture reads.
  bool open() const { return open_.load(std::memory_order_acquire); }

 private:
  friend class ModelCapture;
  friend class ModelIndex;
  struct Groups {
    uint32_t group = 0;
    uint64_t tiers[kNumTiers] = {};
  };
  struct Preserved {
    const ChainNode* node = nullptr;
    uint32_t begin = 0, end = 0;
    size_t groups_at = 0, groups = 0;
    size_t hashes_at = SIZE_MAX;  // into hashes, once copied
  };
  // Appends `node`'s non-empty holder groups to *out.
  static void CopyGroups(const ChainNode* node, std::vector<Groups>* out);
  void PreserveSlow(const ChainNode* node);
  void FreeingSlow(std::span<ChainNode* const> nodes);
  // Writer: opens a capture of a new generation.
  uint32_t Open();

  uint32_t generation_ = 0;  // writer only: the newest capture's (even)
  // Set by the writer (Open) and cleared by the reader, both under mu_;
  // read without it by the writer's fast paths.
  std::atomic<bool> open_{false};
  Mutex mu_;
  std::vector<Preserved> preserved_ ABSL_GUARDED_BY(mu_);
  std::vector<Groups> groups_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> hashes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const ChainNode*, size_t> preserved_at_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<const ChainNode*> freed_ ABSL_GUARDED_BY(mu_);
};

class ModelCapture {
 public:
  // Writer (ModelIndex::BeginCapture).
  // `live`: the source ids in use at Begin (a run names only those).
  ModelCapture(CaptureShared* shared, std::vector<const ChainNode*> nodes, std::vector<bool> live);
  ~ModelCapture();
  ModelCapture(const ModelCapture&) = delete;
  ModelCapture& operator=(const ModelCapture&) = delete;

  // Every entry of Begin, once: fn(source id, tier, hashes) per node and
  // holder (the ids of ModelIndex::BeginCapture's source list).
  template <typename Fn>
  void ForEachRun(const Fn& fn);

 private:
  // Copies the node under mu_ into groups_/hashes_; false when it is not
  // the reader's to take (preserved or freed by the writer).
  bool Take(const ChainNode* node);
  // Ends the capture; *out gets the preserved nodes' runs.
  void Close(std::vector<CaptureShared::Preserved>* preserved,
             std::vector<CaptureShared::Groups>* groups, std::vector<uint64_t>* hashes);
  template <typename Fn>
  void Emit(std::span<const CaptureShared::Groups> groups, std::span<const uint64_t> hashes,
            const Fn& fn) const;

  CaptureShared* const shared_;
  const uint32_t generation_;
  std::vector<const ChainNode*> nodes_;
  std::vector<bool> live_;  // by source id, as of Begin
  bool closed_ = false;
  // The node being read (reader only).
  std::vector<CaptureShared::Groups> groups_;
  std::vector<uint64_t> hashes_;
};

template <typename Fn>
void ModelCapture::Emit(std::span<const CaptureShared::Groups> groups,
                        std::span<const uint64_t> hashes, const Fn& fn) const {
  if (hashes.empty()) return;
  for (const CaptureShared::Groups& g : groups) {
    for (int t = 0; t < kNumTiers; ++t) {
      for (uint64_t bits = g.tiers[t]; bits != 0; bits &= bits - 1) {
        const uint32_t id = g.group * kGroupBits + static_cast<uint32_t>(std::countr_zero(bits));
        if (id < live_.size() && live_[id]) fn(id, static_cast<Tier>(t), hashes);
      }
    }
  }
}

template <typename Fn>
void ModelCapture::ForEachRun(const Fn& fn) {
  if (closed_) return;
  for (const ChainNode* node : nodes_) {
    if (Take(node)) Emit(groups_, hashes_, fn);
  }
  std::vector<CaptureShared::Preserved> preserved;
  std::vector<CaptureShared::Groups> groups;
  std::vector<uint64_t> hashes;
  Close(&preserved, &groups, &hashes);
  for (const CaptureShared::Preserved& p : preserved) {
    Emit(std::span<const CaptureShared::Groups>(groups).subspan(p.groups_at, p.groups),
         std::span<const uint64_t>(hashes).subspan(p.hashes_at, p.end - p.begin), fn);
  }
}

}  // namespace kvindex::index::internal
