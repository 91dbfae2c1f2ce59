// SourceQuota: a fleet-wide bound on a model's source ids (docs/security.md,
// "A fleet-wide source quota"). A model's index holds at most kModelSources
// sources (index::internal::kMaxSources); without a quota, nodes announcing
// made-up workers could take them all and lock every other node out of the
// model. The rule, per stored event of a source the model does not hold yet:
//   - while the model holds fewer than kFillThreshold (3/4) sources, any
//     node may add it (each node is still bounded by max_sources_per_node);
//   - from there on, a node may add it only while it holds fewer than
//     share() = (kModelSources - kFillThreshold) / max_nodes sources of the
//     model.
// So the model holds at most kFillThreshold + max_nodes * share() <=
// kModelSources sources, and each of at most max_nodes live nodes can always
// place share() sources in every model, whatever the others announce.
//
// The decision reads only the index (a function of the log, equal on every
// replica at the same position and across a restore: "holds" means holds an
// entry, which a checkpoint keeps) and the AgentTable's ownership (log
// state), against the state before the message, adding what the message
// itself adds in order. A refused source's stored and removed events of that
// model are dropped, all of them in the message, none applied (the index
// undercounts it, never overcounts); the message's other events, and every
// other node's data, are untouched. The AgentTable still sees every event
// (ownership does not depend on the index).
//
//   SourceQuota quota(agent_options.max_nodes);
//   std::vector<uint8_t> refused;
//   if (quota.Check(node, events, index, agents, &refused)) drop events[i] where refused[i];
//
// Thread safety: the apply thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "shared/consume/agent_table.h"
#include "shared/index/index_interface.h"
#include "shared/model/placement_event.h"

namespace kvindex::consume {

class SourceQuota {
 public:
  static constexpr size_t kModelSources = 4096;
  static constexpr size_t kFillThreshold = kModelSources / 4 * 3;

  explicit SourceQuota(size_t max_nodes) : max_nodes_(max_nodes == 0 ? 1 : max_nodes) {}

  // A node's guaranteed sources per model: (kModelSources - kFillThreshold)
  // / max_nodes, at least 1.
  size_t share() const;

  // Sets (*refused)[i] for each event of `events` (a message `node` may
  // send, already admitted) that is dropped by the rule above; true when
  // any is. *refused is resized to events.size() when something is refused.
  bool Check(const std::string& node, std::span<const PlacementEvent> events,
             const index::IndexInterface& index, const AgentTable& agents,
             std::vector<uint8_t>* refused);

 private:
  // The message's stored events of one model.
  struct ModelStores {
    std::string_view model;
    size_t stores = 0;
  };
  void CheckModel(const std::string& node, std::string_view model,
                  std::span<const PlacementEvent> events, const index::IndexInterface& index,
                  const AgentTable& agents, std::vector<uint8_t>* refused, bool* any);

  const size_t max_nodes_;
  // Scratch reused across messages.
  std::vector<ModelStores> models_;
  std::vector<SourceKey> keys_;
  absl::flat_hash_set<SourceKey> held_;
  absl::flat_hash_set<SourceKey> denied_;
};

}  // namespace kvindex::consume
