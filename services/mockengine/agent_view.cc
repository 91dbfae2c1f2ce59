#include "services/mockengine/agent_view.h"

namespace kvindex::mockengine {

bool AgentView::Known(uint64_t hash) const {
  return held_[0].contains(hash) || held_[1].contains(hash) || held_[2].contains(hash);
}

void AgentView::Clear() {
  for (auto& set : held_) set.clear();
}

void AgentView::Apply(std::span<const wire::WireEvent> events) {
  for (const wire::WireEvent& event : events) {
    if (event.type == wire::EventType::kAllBlocksCleared) {
      Clear();
      continue;
    }
    // The mock engine emits only media it maps to device, host or disk.
    const TierOrDrop tier = TierFromMedium(event.medium);
    if (tier.drop != DropReason::kNone || tier.tier == Tier::kExternal) continue;
    auto& set = held_[static_cast<int>(tier.tier)];
    if (event.type == wire::EventType::kBlockRemoved) {
      for (uint64_t hash : event.block_hashes) set.erase(hash);
    } else if (event.type == wire::EventType::kBlockStored) {
      if (event.block_size == 0 || event.token_ids.empty()) {
        for (uint64_t hash : event.block_hashes) {
          if (Known(hash)) set.insert(hash);
        }
      } else if (!event.parent_block_hash || Known(*event.parent_block_hash)) {
        set.insert(event.block_hashes.begin(), event.block_hashes.end());
      }
    }
  }
}

}  // namespace kvindex::mockengine
