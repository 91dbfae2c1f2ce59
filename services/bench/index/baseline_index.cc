#include "services/bench/index/baseline_index.h"

#include <algorithm>
#include <mutex>

namespace kvindex::bench {

using index::MatchResult;
using index::WorkerMatch;

BaselineIndex::BaselineIndex(std::string model)
    : model_(std::move(model)),
      blocks_(0, absl::Hash<uint64_t>(), std::equal_to<uint64_t>(),
              index::internal::CountingAllocator<std::pair<const uint64_t, HolderSet>>(&memory_)) {}

uint32_t BaselineIndex::SourceId(const SourceKey& source) {
  auto [it, inserted] = ids_.try_emplace(source, static_cast<uint32_t>(keys_.size()));
  if (inserted) keys_.push_back(source);
  return it->second;
}

void BaselineIndex::EraseSource(uint32_t id) {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    for (int t = 0; t < kNumTiers; ++t) entries_[t] -= it->second.erase(id << 2 | t);
    if (it->second.empty()) {
      blocks_.erase(it++);
    } else {
      ++it;
    }
  }
}

index::ApplyResult BaselineIndex::ApplyMessage(std::span<const PlacementEvent> events,
                                               uint64_t log_position) {
  WriterLock lock(&mu_);
  if (log_position <= applied_seq_) return {};
  applied_seq_ = log_position;
  for (const PlacementEvent& event : events) ApplyLocked(event);
  index::ApplyResult result;
  result.applied = true;
  return result;
}

void BaselineIndex::ApplyLocked(const PlacementEvent& event) {
  if (event.model != model_ && !event.model.empty()) return;
  const uint32_t tier = static_cast<uint32_t>(event.tier);
  switch (event.kind) {
    case PlacementKind::kStored: {
      if (event.block_size != 0) block_size_ = event.block_size;
      const uint32_t member = SourceId(event.source) << 2 | tier;
      for (uint64_t h : event.block_hashes) {
        auto it = blocks_.find(h);
        if (it == blocks_.end()) {
          it = blocks_
                   .try_emplace(h, 0, absl::Hash<uint32_t>(), std::equal_to<uint32_t>(),
                                index::internal::CountingAllocator<uint32_t>(&memory_))
                   .first;
        }
        entries_[tier] += it->second.insert(member).second;
      }
      break;
    }
    case PlacementKind::kRemoved: {
      auto id = ids_.find(event.source);
      if (id == ids_.end()) break;
      const uint32_t member = id->second << 2 | tier;
      for (uint64_t h : event.block_hashes) {
        auto it = blocks_.find(h);
        if (it == blocks_.end()) continue;
        entries_[tier] -= it->second.erase(member);
        if (it->second.empty()) blocks_.erase(it);
      }
      break;
    }
    case PlacementKind::kCleared: {
      auto id = ids_.find(event.source);
      if (id != ids_.end()) EraseSource(id->second);
      break;
    }
    case PlacementKind::kWorkerExpired:
      for (const auto& [key, id] : ids_) {
        if (key.worker == event.source.worker) EraseSource(id);
      }
      break;
    case PlacementKind::kHeartbeat:
    case PlacementKind::kAgentExpired:
      break;
  }
}

StatusOr<MatchResult> BaselineIndex::MatchSequenceHashes(std::string_view model,
                                                         std::span<const uint64_t> seq,
                                                         const index::MatchOptions& options) const {
  if (model != model_) return absl::NotFoundError("unknown model");
  MatchResult result;
  result.blocks = static_cast<uint32_t>(seq.size());
  if (options.max_blocks != 0 && options.max_blocks < seq.size()) {
    seq = seq.first(options.max_blocks);
  }
  mu_.ReaderLock();
  result.applied_seq = applied_seq_;
  // One row per source holding block 0; each later block is checked per
  // still-matching source, fastest tier first.
  std::vector<bool> alive, on_device;
  std::vector<uint32_t> ids;
  for (size_t k = 0; k < seq.size(); ++k) {
    auto it = blocks_.find(seq[k]);
    if (it == blocks_.end()) break;
    const HolderSet& holders = it->second;
    if (k == 0) {
      for (uint32_t member : holders) ids.push_back(member >> 2);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (uint32_t id : ids) {
        WorkerMatch row;
        row.source = keys_[id];
        result.workers.push_back(row);
        alive.push_back(true);
        on_device.push_back(true);
      }
    }
    bool any = false;
    for (size_t r = 0; r < result.workers.size(); ++r) {
      if (!alive[r]) continue;
      int tier = -1;
      for (uint32_t t = 0; t < kNumTiers && tier < 0; ++t) {
        if (holders.contains(ids[r] << 2 | t)) tier = static_cast<int>(t);
      }
      if (tier < 0) {
        alive[r] = false;
        continue;
      }
      any = true;
      WorkerMatch& row = result.workers[r];
      ++row.longest;
      uint32_t* counts[kNumTiers] = {&row.device, &row.host, &row.disk, &row.external};
      ++*counts[tier];
      on_device[r] = on_device[r] && tier == 0;
      if (on_device[r]) ++row.device_prefix;
    }
    if (!any) break;
  }
  mu_.ReaderUnlock();  // sorting needs no lock
  index::SortWorkerMatches(&result.workers);
  return result;
}

std::optional<uint32_t> BaselineIndex::BlockSize(std::string_view model) const {
  if (model != model_) return std::nullopt;
  ReaderLock lock(&mu_);
  return block_size_;
}

index::IndexStats BaselineIndex::Stats() const {
  ReaderLock lock(&mu_);
  index::IndexStats stats;
  stats.applied_seq = applied_seq_;
  for (int t = 0; t < kNumTiers; ++t) stats.entries[t] = entries_[t];
  stats.sources = keys_.size();
  stats.bytes_allocated = memory_.bytes();
  return stats;
}

}  // namespace kvindex::bench
