#include "shared/compat/sglang_alias_reference.h"

namespace kvindex::compat {

void SglangAliasReference::OnApplied(std::span<const PlacementEvent> events) {
  for (const PlacementEvent& event : events) {
    if (event.kind != PlacementKind::kStored || event.sglang_hashes.empty() ||
        event.sglang_hashes.size() != event.block_hashes.size()) {
      continue;
    }
    for (size_t i = 0; i < event.block_hashes.size(); ++i) {
      std::map<uint64_t, uint64_t>& model = aliases_[event.model];
      if (model.count(event.sglang_hashes[i]) != 0) continue;  // known or a conflict
      bool aliased = false;
      for (const auto& [sglang, canonical] : model) aliased |= canonical == event.block_hashes[i];
      if (aliased) continue;
      size_t total = 0;
      for (const auto& [name, entries] : aliases_) total += entries.size();
      if (total >= max_entries_) continue;
      model[event.sglang_hashes[i]] = event.block_hashes[i];
    }
  }
  // An alias lives while some source holds its block.
  for (auto& [name, entries] : aliases_) {
    for (auto it = entries.begin(); it != entries.end();) {
      const uint64_t canonical = it->second;
      StatusOr<index::MatchResult> held =
          index_->MatchSequenceHashes(name, std::span<const uint64_t>(&canonical, 1));
      if (held.ok() && !held->workers.empty()) {
        ++it;
      } else {
        it = entries.erase(it);
      }
    }
  }
}

std::vector<SglangAlias> SglangAliasReference::Entries() const {
  std::vector<SglangAlias> out;
  for (const auto& [name, entries] : aliases_) {
    for (const auto& [sglang, canonical] : entries) out.push_back({name, sglang, canonical});
  }
  return out;
}

}  // namespace kvindex::compat
