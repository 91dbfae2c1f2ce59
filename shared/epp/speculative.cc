#include "shared/epp/speculative.h"

#include <xxhash.h>

#include <algorithm>

namespace kvindex::epp {
namespace {

uint64_t ModelHash(std::string_view model) { return XXH3_64bits(model.data(), model.size()); }

int64_t Ns(SpeculativeCache::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void SpeculativeCache::Configure(SpeculativeOptions options) {
  WriterLock lock(&mu_);
  max_entries_ = options.max_entries;
  ttl_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(options.ttl).count(),
                std::memory_order_relaxed);
}

bool SpeculativeCache::Valid(const Holder& h, int64_t now_ns) const {
  return h.expires_ns > now_ns && h.generation == sources_[h.source].generation;
}

uint32_t SpeculativeCache::Intern(std::string_view model, const SourceKey& source) {
  auto [it, inserted] = source_ids_.try_emplace(std::pair{std::string(model), source},
                                                static_cast<uint32_t>(sources_.size()));
  if (inserted) sources_.push_back({std::string(model), source, 0});
  return it->second;
}

void SpeculativeCache::Record(std::string_view model, const SourceKey& source,
                              std::span<const uint64_t> seq_hashes, Clock::time_point now) {
  if (!enabled() || seq_hashes.empty()) return;
  const uint64_t model_hash = ModelHash(model);
  const int64_t now_ns = Ns(now);
  const int64_t expires_ns = now_ns + ttl_ns_.load(std::memory_order_relaxed);
  WriterLock lock(&mu_);
  const uint32_t id = Intern(model, source);
  const uint32_t generation = sources_[id].generation;
  bool purged = false;
  // Counted once per call, not with an atomic add per block.
  uint64_t recorded = 0;
  for (size_t i = 0; i < seq_hashes.size(); ++i) {
    const BlockKey key{model_hash, seq_hashes[i]};
    auto it = blocks_.find(key);
    if (it != blocks_.end()) {
      auto holder = std::find_if(it->second.begin(), it->second.end(),
                                 [id](const Holder& h) { return h.source == id; });
      if (holder != it->second.end()) {
        holder->generation = generation;
        holder->expires_ns = expires_ns;
        ++recorded;
        continue;
      }
    }
    if (entries_ >= max_entries_ && !purged) {
      PurgeExpired(now_ns);
      purged = true;
      it = blocks_.find(key);  // the purge may have erased it
    }
    if (entries_ >= max_entries_) {
      counters_.dropped_full.fetch_add(seq_hashes.size() - i, std::memory_order_relaxed);
      break;
    }
    if (it == blocks_.end()) it = blocks_.try_emplace(key).first;
    it->second.push_back({id, generation, expires_ns});
    ++entries_;
    ++recorded;
  }
  counters_.recorded.fetch_add(recorded, std::memory_order_relaxed);
}

void SpeculativeCache::Prefixes(std::string_view model, std::span<const uint64_t> seq_hashes,
                                Clock::time_point now,
                                std::vector<std::pair<SourceKey, uint32_t>>* rows) const {
  rows->clear();
  if (!enabled() || seq_hashes.empty()) return;
  const uint64_t model_hash = ModelHash(model);
  const int64_t now_ns = Ns(now);
  ReaderLock lock(&mu_);
  auto it = blocks_.find(BlockKey{model_hash, seq_hashes[0]});
  if (it == blocks_.end()) return;
  // Sources still holding every block so far, with their row.
  absl::InlinedVector<std::pair<uint32_t, size_t>, 4> alive;
  for (const Holder& h : it->second) {
    if (!Valid(h, now_ns) || sources_[h.source].model != model) continue;
    alive.push_back({h.source, rows->size()});
    rows->push_back({sources_[h.source].source, 1});
  }
  for (size_t i = 1; i < seq_hashes.size() && !alive.empty(); ++i) {
    it = blocks_.find(BlockKey{model_hash, seq_hashes[i]});
    if (it == blocks_.end()) break;
    size_t kept = 0;
    for (const auto& [id, row] : alive) {
      bool holds = false;
      for (const Holder& h : it->second) holds |= h.source == id && Valid(h, now_ns);
      if (!holds) continue;
      ++(*rows)[row].second;
      alive[kept++] = {id, row};
    }
    alive.resize(kept);
  }
}

void SpeculativeCache::Invalidate(std::string_view model, const PlacementEvent& event) {
  const bool any_rank = event.kind == PlacementKind::kWorkerExpired;
  for (SourceState& s : sources_) {
    if (!model.empty() && s.model != model) continue;
    if (s.source.worker != event.source.worker) continue;
    if (!any_rank && s.source.dp_rank != event.source.dp_rank) continue;
    ++s.generation;
    counters_.invalidated.fetch_add(1, std::memory_order_relaxed);
  }
}

void SpeculativeCache::OnApplied(std::span<const PlacementEvent> events) {
  if (!enabled()) return;
  auto contradicts = [](const PlacementEvent& e) {
    return e.kind == PlacementKind::kRemoved || e.kind == PlacementKind::kCleared ||
           e.kind == PlacementKind::kWorkerExpired;
  };
  if (std::none_of(events.begin(), events.end(), contradicts)) return;
  WriterLock lock(&mu_);
  for (const PlacementEvent& event : events) {
    if (!contradicts(event)) continue;
    // A cleared event without a model, and a worker's expiry: every model.
    Invalidate(event.kind == PlacementKind::kWorkerExpired ? std::string_view() : event.model,
               event);
  }
}

void SpeculativeCache::PurgeExpired(int64_t now_ns) {
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    auto& holders = it->second;
    const size_t before = holders.size();
    size_t kept = 0;
    for (const Holder& h : holders) {
      if (Valid(h, now_ns)) holders[kept++] = h;
    }
    holders.resize(kept);
    entries_ -= before - kept;
    counters_.expired.fetch_add(before - kept, std::memory_order_relaxed);
    if (holders.empty()) {
      blocks_.erase(it++);
    } else {
      ++it;
    }
  }
}

size_t SpeculativeCache::size() const {
  ReaderLock lock(&mu_);
  return entries_;
}

}  // namespace kvindex::epp
