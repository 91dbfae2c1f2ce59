// AgentView: what an index may hold for one source, derived from the events
// the source actually delivered, by semantics.md section 3's rules (an
// independent model, not the agent's code): a store with tokens whose parent
// the agent does not know is dropped (parent_not_found), a placeholder
// resolves only through a block still held in some tier, a clear (decode
// error, unrecoverable gap, restart) forgets everything.
//
// For a source that never needed a clear it equals the engine's tiers; after
// a fault clear it is the `stored_since_clear` part of the ground truth.
//
// Thread safety: none.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "shared/model/tier.h"
#include "shared/wire/event_encoder.h"

namespace kvindex::mockengine {

class AgentView {
 public:
  void Apply(std::span<const wire::WireEvent> events);
  void Clear();
  bool Holds(Tier tier, uint64_t engine_hash) const {
    return held_[static_cast<int>(tier)].contains(engine_hash);
  }
  std::vector<uint64_t> EngineHashes(Tier tier) const {
    const auto& set = held_[static_cast<int>(tier)];
    return {set.begin(), set.end()};
  }

 private:
  bool Known(uint64_t hash) const;
  absl::flat_hash_set<uint64_t> held_[3];  // device, host, disk
};

}  // namespace kvindex::mockengine
