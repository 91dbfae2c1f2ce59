// EventObserver: a per-engine-event hook on SourceProcessor.
//
// `kvindex-ctl decode` prints one JSON line per engine event from it; tests
// use it to assert drop reasons. The processor calls it once per decoded
// engine event, after the event is applied, with the event as decoded and
// what normalization made of it. With no observer set the processor does no
// extra work (no outcome bookkeeping, no informational hashing).
//
// Lifetime: every view in the arguments is valid only during the call.
// Thread safety: called on the processor's thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "shared/model/drop_reason.h"
#include "shared/model/placement_event.h"
#include "shared/model/tier.h"
#include "shared/wire/engine_event.h"

namespace kvindex::normalize {

// What became of one block of the event.
struct BlockOutcome {
  std::optional<uint64_t> canonical;  // nullopt: unknown (unresolved / not found / not hashed)
  bool published = false;             // this block went 0 -> 1 (stored) or 1 -> 0 (removed)
};

struct EventOutcome {
  uint32_t dp_rank = 0;
  // Tier of a stored/removed event whose medium mapped to one.
  std::optional<Tier> tier;
  // kNone: applied in full. An event-counted reason: the event was dropped.
  // kUnresolvedPlaceholder / kBlockNotFound: `dropped_blocks` of its blocks
  // were dropped (the others were applied).
  DropReason drop = DropReason::kNone;
  uint32_t dropped_blocks = 0;
  bool placeholder = false;  // a BlockStored without tokens, resolved through the map
  // Per engine block, in event order (stored / removed events). For a
  // BlockStored dropped before hashing whose tokens still allow it (parent
  // nil or known), `canonical` holds the hashes it would have had and
  // `informational` is true.
  std::span<const BlockOutcome> blocks;
  bool informational = false;
  // Placement events this engine event appended (views into the output).
  std::span<const PlacementEvent> placements;
};

class EventObserver {
 public:
  virtual ~EventObserver() = default;
  // Once per decoded batch, before its events.
  virtual void OnBatch(const wire::EngineBatch& /*batch*/, uint32_t /*dp_rank*/) {}
  virtual void OnEvent(const wire::EngineEvent& event, const EventOutcome& outcome) = 0;
};

}  // namespace kvindex::normalize
