#include "shared/index/reference_index.h"

#include <algorithm>
#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvindex::index {

ApplyResult ReferenceIndex::ApplyMessage(std::span<const PlacementEvent> events,
                                         uint64_t log_position) {
  if (log_position <= applied_seq_) return {};
  applied_seq_ = log_position;
  ApplyResult result;
  result.applied = true;
  for (const PlacementEvent& event : events) ApplyEvent(event, &result);
  if (result.events_over_source_limit != 0) {
    result.status = absl::ResourceExhaustedError("source limit of a model reached");
  }
  return result;
}

bool ReferenceIndex::HoldsAny(const Model& model, const SourceKey& source) {
  auto it = model.entries.lower_bound({source, kAllTiers[0], 0});
  return it != model.entries.end() && std::get<0>(*it) == source;
}

size_t ReferenceIndex::SourcesWithEntries(const Model& model) {
  // Entries are ordered by source first: count where the source changes.
  size_t n = 0;
  const SourceKey* last = nullptr;
  for (const Entry& e : model.entries) {
    if (last == nullptr || *last != std::get<0>(e)) ++n;
    last = &std::get<0>(e);
  }
  return n;
}

void ReferenceIndex::ApplyEvent(const PlacementEvent& event, ApplyResult* result) {
  switch (event.kind) {
    case PlacementKind::kStored: {
      Model& model = models_[event.model];
      if (event.block_size != 0) model.block_size = event.block_size;
      // A source takes one of the model's source slots while it holds an
      // entry, from its first stored entry to its last removed one.
      if (!event.block_hashes.empty() && !HoldsAny(model, event.source) &&
          SourcesWithEntries(model) >= max_sources_) {
        ++events_over_source_limit_;
        ++result->events_over_source_limit;
        if (departure_observer_ != nullptr && !event.block_hashes.empty()) {
          departure_observer_->OnNotIndexed(event.model, event.block_hashes);
        }
        break;
      }
      for (uint64_t h : event.block_hashes) model.entries.insert({event.source, event.tier, h});
      break;
    }
    case PlacementKind::kRemoved: {
      auto it = models_.find(event.model);
      if (it == models_.end()) break;
      for (uint64_t h : event.block_hashes) {
        EraseEntry(it->first, it->second, {event.source, event.tier, h});
      }
      break;
    }
    case PlacementKind::kCleared:
    case PlacementKind::kWorkerExpired:
      for (auto& [name, model] : models_) {
        if (event.kind == PlacementKind::kCleared && !event.model.empty() && name != event.model) {
          continue;
        }
        std::vector<Entry> doomed;
        for (const Entry& e : model.entries) {
          const SourceKey& s = std::get<0>(e);
          const bool hit = event.kind == PlacementKind::kCleared ? s == event.source
                                                                 : s.worker == event.source.worker;
          if (hit) doomed.push_back(e);
        }
        for (const Entry& e : doomed) EraseEntry(name, model, e);
      }
      break;
    case PlacementKind::kHeartbeat:
    case PlacementKind::kAgentExpired:
      break;
  }
}

void ReferenceIndex::EraseEntry(const std::string& name, Model& model, const Entry& entry) {
  if (model.entries.count(entry) == 0) return;
  Erase(model, entry);
  if (departure_observer_ == nullptr) return;
  const uint64_t hash = std::get<2>(entry);
  for (const Entry& e : model.entries) {
    if (std::get<2>(e) == hash) return;  // still held
  }
  departure_observer_->OnDeparted(name, std::span<const uint64_t>(&hash, 1));
}

StatusOr<MatchResult> ReferenceIndex::MatchSequenceHashes(std::string_view model_name,
                                                          std::span<const uint64_t> seq,
                                                          const MatchOptions& options) const {
  auto it = models_.find(model_name);
  if (it == models_.end()) {
    return absl::NotFoundError("unknown model '" + std::string(model_name) + "'");
  }
  const Model& model = it->second;
  MatchResult result;
  result.blocks = static_cast<uint32_t>(seq.size());
  result.applied_seq = applied_seq_;
  if (options.max_blocks != 0 && options.max_blocks < seq.size()) {
    seq = seq.first(options.max_blocks);
  }
  std::set<SourceKey> sources;
  for (const Entry& e : model.entries) sources.insert(std::get<0>(e));
  for (const SourceKey& source : sources) {
    auto holds = [&](Tier tier, uint64_t h) { return model.entries.count({source, tier, h}) > 0; };
    WorkerMatch row;
    row.source = source;
    bool device_run = true;
    for (uint64_t h : seq) {
      // Fastest tier that holds the block, if any.
      int fastest = -1;
      for (Tier tier : kAllTiers) {
        if (holds(tier, h)) {
          fastest = static_cast<int>(tier);
          break;
        }
      }
      if (fastest < 0) break;
      ++row.longest;
      uint32_t* counts[kNumTiers] = {&row.device, &row.host, &row.disk, &row.external};
      ++*counts[fastest];
      device_run = device_run && fastest == 0;
      if (device_run) ++row.device_prefix;
    }
    if (row.longest > 0) result.workers.push_back(row);
  }
  SortWorkerMatches(&result.workers);
  return result;
}

std::optional<uint32_t> ReferenceIndex::BlockSize(std::string_view model) const {
  auto it = models_.find(model);
  if (it == models_.end()) return std::nullopt;
  return it->second.block_size;
}

std::vector<std::string> ReferenceIndex::Models() const {
  std::vector<std::string> names;
  for (const auto& [name, model] : models_) names.push_back(name);
  return names;
}

IndexStats ReferenceIndex::Stats() const {
  IndexStats stats;
  stats.applied_seq = applied_seq_;
  std::set<std::pair<std::string, SourceKey>> sources;
  for (const auto& [name, model] : models_) {
    for (const auto& [source, tier, hash] : model.entries) {
      ++stats.entries[static_cast<int>(tier)];
      sources.insert({name, source});
      // key(e) exactly as semantics.md section 6 spells it.
      std::string key = name;
      key.push_back('\0');
      key += source.worker;
      key.push_back('\0');
      for (int i = 0; i < 4; ++i) key.push_back(static_cast<char>(source.dp_rank >> (8 * i)));
      key.push_back(static_cast<char>(tier));
      for (int i = 0; i < 8; ++i) key.push_back(static_cast<char>(hash >> (8 * i)));
      stats.digest += XXH3_64bits_withSeed(key.data(), key.size(), 0);
    }
  }
  stats.sources = sources.size();
  stats.events_over_source_limit = events_over_source_limit_;
  return stats;
}

std::vector<SourceInfo> ReferenceIndex::Sources() const {
  std::vector<SourceInfo> out;
  for (const auto& [name, model] : models_) {
    std::map<SourceKey, SourceInfo> by_source;
    for (const auto& [source, tier, hash] : model.entries) {
      SourceInfo& info = by_source[source];
      info.model = name;
      info.source = source;
      ++info.entries[static_cast<int>(tier)];
    }
    for (auto& [source, info] : by_source) out.push_back(info);
  }
  return out;
}

void ReferenceIndex::ForEachEntry(const EntryVisitor& fn) const {
  for (const auto& [name, model] : models_) {
    for (const auto& [source, tier, hash] : model.entries) fn(name, source, tier, hash);
  }
}

void ReferenceIndex::RestoreEntry(std::string_view model_name, const SourceKey& source, Tier tier,
                                  uint64_t seq_hash, uint32_t block_size) {
  Model& model = models_[std::string(model_name)];
  if (block_size != 0) model.block_size = block_size;
  model.entries.insert({source, tier, seq_hash});
}

}  // namespace kvindex::index
