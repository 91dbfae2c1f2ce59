#include "shared/index/internal/model_capture.h"

#include <algorithm>

namespace kvindex::index::internal {

void CaptureShared::CopyGroups(const ChainNode* node, std::vector<Groups>* out) {
  for (uint32_t g = 0; g < node->num_groups; ++g) {
    const HolderGroup& hg = node->group(g);
    Groups copy;
    copy.group = hg.group;
    uint64_t any = 0;
    for (int t = 0; t < kNumTiers; ++t) {
      copy.tiers[t] = hg.tiers[t].load(std::memory_order_relaxed);
      any |= copy.tiers[t];
    }
    if (any != 0) out->push_back(copy);
  }
}

uint32_t CaptureShared::Open() {
  MutexLock lock(&mu_);
  generation_ += 2;
  preserved_.clear();
  groups_.clear();
  hashes_.clear();
  preserved_at_.clear();
  freed_.clear();
  open_.store(true, std::memory_order_release);
  return generation_;
}

void CaptureShared::PreserveSlow(const ChainNode* node) {
  MutexLock lock(&mu_);
  // Re-checked under the lock: the reader may have taken the node or ended.
  const uint32_t seen = node->capture().load(std::memory_order_relaxed);
  if (!open_.load(std::memory_order_relaxed) || seen == generation_ || seen == born()) return;
  Preserved p;
  p.node = node;
  p.begin = node->begin.load(std::memory_order_relaxed);
  p.end = node->end.load(std::memory_order_relaxed);
  p.groups_at = groups_.size();
  CopyGroups(node, &groups_);
  p.groups = groups_.size() - p.groups_at;
  node->capture().store(generation_, std::memory_order_release);
  if (p.begin == p.end || p.groups == 0) return;  // nothing to keep
  preserved_at_.emplace(node, preserved_.size());
  preserved_.push_back(p);
}

void CaptureShared::FreeingSlow(std::span<ChainNode* const> nodes) {
  MutexLock lock(&mu_);
  if (!open_.load(std::memory_order_relaxed)) return;
  for (const ChainNode* node : nodes) {
    if (node->capture().load(std::memory_order_relaxed) == born()) continue;  // not in the list
    freed_.insert(node);
    auto it = preserved_at_.find(node);
    if (it == preserved_at_.end()) continue;
    Preserved& p = preserved_[it->second];
    if (p.hashes_at != SIZE_MAX) continue;
    p.hashes_at = hashes_.size();
    hashes_.insert(hashes_.end(), node->hashes() + p.begin, node->hashes() + p.end);
  }
}

ModelCapture::ModelCapture(CaptureShared* shared, std::vector<const ChainNode*> nodes,
                           std::vector<bool> live)
    : shared_(shared),
      generation_(shared->Open()),
      nodes_(std::move(nodes)),
      live_(std::move(live)) {}

ModelCapture::~ModelCapture() {
  if (closed_) return;
  MutexLock lock(&shared_->mu_);
  shared_->open_.store(false, std::memory_order_release);
  shared_->preserved_.clear();
  shared_->groups_.clear();
  shared_->hashes_.clear();
  shared_->preserved_at_.clear();
  shared_->freed_.clear();
}

bool ModelCapture::Take(const ChainNode* node) {
  groups_.clear();
  hashes_.clear();
  MutexLock lock(&shared_->mu_);
  // A freed node's memory may hold another node now: not read at all.
  if (shared_->freed_.contains(node)) return false;
  if (node->capture().load(std::memory_order_relaxed) == generation_) return false;  // preserved
  const uint32_t b = node->begin.load(std::memory_order_relaxed);
  const uint32_t e = node->end.load(std::memory_order_relaxed);
  if (b != e) {
    CaptureShared::CopyGroups(node, &groups_);
    if (!groups_.empty()) hashes_.assign(node->hashes() + b, node->hashes() + e);
  }
  // Release: the writer that sees it taken changes the node after these reads.
  node->capture().store(generation_, std::memory_order_release);
  return !hashes_.empty();
}

void ModelCapture::Close(std::vector<CaptureShared::Preserved>* preserved,
                         std::vector<CaptureShared::Groups>* groups,
                         std::vector<uint64_t>* hashes) {
  closed_ = true;
  MutexLock lock(&shared_->mu_);
  // Every node of the list is taken now, so the writer preserves no more;
  // the preserved nodes not freed yet are still whole: copy their hashes.
  for (CaptureShared::Preserved& p : shared_->preserved_) {
    if (p.hashes_at != SIZE_MAX) continue;
    p.hashes_at = shared_->hashes_.size();
    shared_->hashes_.insert(shared_->hashes_.end(), p.node->hashes() + p.begin,
                            p.node->hashes() + p.end);
  }
  *preserved = std::move(shared_->preserved_);
  *groups = std::move(shared_->groups_);
  *hashes = std::move(shared_->hashes_);
  shared_->preserved_.clear();
  shared_->groups_.clear();
  shared_->hashes_.clear();
  shared_->preserved_at_.clear();
  shared_->freed_.clear();
  shared_->open_.store(false, std::memory_order_release);
}

}  // namespace kvindex::index::internal
