#include "shared/index/internal/source_table.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "shared/index/internal/chain_node.h"

namespace kvindex::index::internal {
namespace {

size_t RecordBytes(const SourceRecord& rec) {
  auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; };
  return sizeof(SourceRecord) + heap(rec.key.worker) + heap(rec.digest_prefix);
}

}  // namespace

SourceTable::SourceTable(MemoryCounter* memory)
    : memory_(memory),
      ids_(0, absl::Hash<SourceKey>(), std::equal_to<SourceKey>(),
           CountingAllocator<std::pair<const SourceKey, uint32_t>>(memory)),
      free_ids_(CountingAllocator<uint32_t>(memory)) {
  // Without address space for them no source is ever added (counted as over
  // the source limit: fail closed).
  no_room_ = !records_.Reserve(kMaxSources, memory) || !ranks_.Reserve(kMaxSources, memory);
}

SourceTable::~SourceTable() {
  for (uint32_t i = 0; i < records_.size(); ++i) {
    if (SourceRecord* rec = records_[i].load(std::memory_order_relaxed)) Destroy(rec);
  }
}

SourceRecord* SourceTable::Find(const SourceKey& source) const {
  auto it = ids_.find(source);
  if (it == ids_.end()) return nullptr;
  return records_[it->second].load(std::memory_order_relaxed);
}

SourceRecord* SourceTable::Add(const SourceKey& source, std::string digest_prefix) {
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = id_limit_.load(std::memory_order_relaxed);
    if (no_room_ || id >= kMaxSources) return nullptr;
    // Readers see the new id only after id_limit_ or a node bit publishes it.
    if (!records_.EnsureSize(id + 1) || !ranks_.EnsureSize(id + 1)) return nullptr;
  }
  auto* rec = new SourceRecord;
  rec->key = source;
  rec->digest_prefix = std::move(digest_prefix);
  rec->id = id;
  memory_->Add(RecordBytes(*rec));
  ids_.emplace(source, id);
  // Publish the record before any bit of its id can appear in a node.
  records_[id].store(rec, std::memory_order_release);
  if (id + 1 > id_limit_.load(std::memory_order_relaxed)) {
    id_limit_.store(id + 1, std::memory_order_release);
  }
  return rec;
}

void SourceTable::Rerank() {
  std::vector<std::pair<const SourceKey*, uint32_t>> order;
  order.reserve(ids_.size());
  for (const auto& [key, id] : ids_) order.emplace_back(&key, id);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  for (uint32_t r = 0; r < order.size(); ++r) {
    ranks_[order[r].second].store(r, std::memory_order_relaxed);
  }
}

SourceRecord* SourceTable::Release(uint32_t id) {
  SourceRecord* rec = records_[id].load(std::memory_order_relaxed);
  records_[id].store(nullptr, std::memory_order_release);
  ids_.erase(rec->key);
  free_ids_.push_back(id);
  return rec;
}

void SourceTable::Destroy(SourceRecord* rec) {
  memory_->Sub(RecordBytes(*rec));
  delete rec;
}

}  // namespace kvindex::index::internal
