#include "shared/index/internal/source_table.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "shared/index/internal/chain_node.h"

namespace kvindex::index::internal {
namespace {

size_t RecordBytes(const SourceRecord& rec) {
  auto heap = [](const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; };
  return sizeof(SourceRecord) + heap(rec.key.worker) + heap(rec.digest_prefix);
}

}  // namespace

SourceTable::SourceTable(MemoryCounter* memory, uint32_t max_sources)
    : memory_(memory),
      max_sources_(std::min(max_sources, kMaxSources)),
      ids_(0, absl::Hash<SourceKey>(), std::equal_to<SourceKey>(),
           CountingAllocator<std::pair<const SourceKey, uint32_t>>(memory)) {
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
  if (no_room_) return nullptr;
  uint32_t id = kMaxSources;
  for (uint32_t w = 0; w < kMaxSources / 64; ++w) {
    if (used_[w] != ~uint64_t{0}) {
      id = w * 64 + static_cast<uint32_t>(std::countr_one(used_[w]));
      break;
    }
  }
  if (id >= max_sources_) return nullptr;
  if (id >= id_limit_.load(std::memory_order_relaxed)) {
    // Readers see the new id only after id_limit_ or a node bit publishes it.
    if (!records_.EnsureSize(id + 1) || !ranks_.EnsureSize(id + 1)) return nullptr;
  }
  used_[id / 64] |= uint64_t{1} << (id % 64);
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

void SourceTable::Rank(uint32_t id) {
  const SourceKey& key = records_[id].load(std::memory_order_relaxed)->key;
  uint32_t r = 0;
  for (const auto& [other, other_id] : ids_) r += other_id != id && other < key ? 1 : 0;
  for (const auto& [other, other_id] : ids_) {
    const uint32_t x = ranks_[other_id].load(std::memory_order_relaxed);
    if (other_id != id && x >= r) ranks_[other_id].store(x + 1, std::memory_order_relaxed);
  }
  ranks_[id].store(r, std::memory_order_relaxed);
}

SourceRecord* SourceTable::Release(uint32_t id) {
  SourceRecord* rec = records_[id].load(std::memory_order_relaxed);
  records_[id].store(nullptr, std::memory_order_release);
  ids_.erase(rec->key);
  used_[id / 64] &= ~(uint64_t{1} << (id % 64));
  const uint32_t r = ranks_[id].load(std::memory_order_relaxed);
  for (const auto& [other, other_id] : ids_) {
    const uint32_t x = ranks_[other_id].load(std::memory_order_relaxed);
    if (x > r) ranks_[other_id].store(x - 1, std::memory_order_relaxed);
  }
  return rec;
}

void SourceTable::Destroy(SourceRecord* rec) {
  memory_->Sub(RecordBytes(*rec));
  delete rec;
}

}  // namespace kvindex::index::internal
