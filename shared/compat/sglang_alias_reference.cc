#include "shared/compat/sglang_alias_reference.h"

namespace kvindex::compat {

void SglangAliasReference::OnApplied(std::span<const PlacementEvent> events) {
  for (const PlacementEvent& event : events) {
    if (event.kind != PlacementKind::kStored || event.sglang_hashes.empty() ||
        event.sglang_hashes.size() != event.block_hashes.size()) {
      continue;
    }
    std::map<uint64_t, uint64_t>& model = aliases_[event.model];
    std::set<uint64_t>& poisoned = poisoned_[event.model];
    auto poison = [&](uint64_t sglang) {
      if (poisoned.size() >= max_poisoned_) {
        closed_.insert(event.model);
      } else {
        poisoned.insert(sglang);
      }
    };
    for (size_t i = 0; i < event.block_hashes.size(); ++i) {
      const uint64_t sglang = event.sglang_hashes[i];
      const uint64_t block = event.block_hashes[i];
      if (closed_.count(event.model) != 0 || poisoned.count(sglang) != 0) continue;
      auto same = model.find(sglang);
      if (same != model.end() && same->second == block) continue;  // known
      auto other = model.end();                                    // the alias of `block`, if any
      for (auto it = model.begin(); it != model.end(); ++it) {
        if (it->second == block) other = it;
      }
      if (same == model.end() && other == model.end()) {
        if (model.size() < max_entries_) model[sglang] = block;
        continue;
      }
      // A conflict: drop both aliases, poison both SGLang hashes.
      const bool had_other = other != model.end();
      const uint64_t other_sglang = had_other ? other->first : 0;
      if (had_other) model.erase(other);
      model.erase(sglang);
      poison(sglang);
      if (had_other) poison(other_sglang);
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
