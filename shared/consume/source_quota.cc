#include "shared/consume/source_quota.h"

#include <algorithm>

#include "shared/index/internal/chain_node.h"

namespace kvindex::consume {

static_assert(SourceQuota::kModelSources == index::internal::kMaxSources,
              "the quota bounds the index's source ids per model");

size_t SourceQuota::share() const {
  return std::max<size_t>(1, (kModelSources - kFillThreshold) / max_nodes_);
}

bool SourceQuota::Check(const std::string& node, std::span<const PlacementEvent> events,
                        const index::IndexInterface& index, const AgentTable& agents,
                        std::vector<uint8_t>* refused) {
  // Usually one model per message, far from full: one count per model.
  models_.clear();
  for (const PlacementEvent& event : events) {
    if (event.kind != PlacementKind::kStored) continue;
    auto it = std::find_if(models_.begin(), models_.end(),
                           [&](const ModelStores& m) { return m.model == event.model; });
    if (it == models_.end()) {
      models_.push_back({event.model, 1});
    } else {
      ++it->stores;
    }
  }
  bool any = false;
  for (const ModelStores& m : models_) {
    // Every add of this message sees fewer than held + stores - 1 sources:
    // below the threshold, nothing to decide.
    if (index.ModelSources(m.model, nullptr) + m.stores <= kFillThreshold) continue;
    CheckModel(node, m.model, events, index, agents, refused, &any);
  }
  return any;
}

void SourceQuota::CheckModel(const std::string& node, std::string_view model,
                             std::span<const PlacementEvent> events,
                             const index::IndexInterface& index, const AgentTable& agents,
                             std::vector<uint8_t>* refused, bool* any) {
  keys_.clear();
  size_t held = index.ModelSources(model, &keys_);
  held_.clear();
  held_.insert(keys_.begin(), keys_.end());
  keys_.clear();
  // The share is fixed by max_nodes, not by the nodes live now: a node that
  // joins later still finds its share free.
  agents.AppendOwned(node, model, &keys_);
  size_t mine = 0;
  for (const SourceKey& source : keys_) mine += held_.contains(source) ? 1 : 0;
  denied_.clear();
  const size_t quota = share();
  for (size_t i = 0; i < events.size(); ++i) {
    const PlacementEvent& event = events[i];
    if (event.model != model) continue;
    if (event.kind != PlacementKind::kStored && event.kind != PlacementKind::kRemoved) continue;
    bool deny = denied_.contains(event.source);
    if (!deny && event.kind == PlacementKind::kStored && !held_.contains(event.source)) {
      if (held >= kFillThreshold && mine >= quota) {
        deny = true;
        denied_.insert(event.source);
      } else {
        held_.insert(event.source);
        ++held;
        ++mine;  // the node's own source (AgentTable admitted the message)
      }
    }
    if (!deny) continue;
    if (!*any) refused->assign(events.size(), 0);
    *any = true;
    (*refused)[i] = 1;
  }
}

}  // namespace kvindex::consume
