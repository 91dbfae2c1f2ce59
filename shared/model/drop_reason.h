// Why the agent dropped an engine event (or some of its blocks).
//
// Each reason is one fixed metric label (kvindex_agent_events_dropped_total
// {reason=...}); semantics.md section 3 defines them. Add new reasons at the
// end and give them a label in drop_reason.cc.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace kvindex {

enum class DropReason : uint8_t {
  kNone = 0,
  kBlockSizeMismatch,
  kParentNotFound,
  kUnresolvedPlaceholder,  // counts blocks
  kUnknownMedium,
  kRemoteLocality,
  kUnknownLocality,
  kGroupFiltered,
  kBlockNotFound,  // counts blocks
  kTokenCountMismatch,
  kUnknownEvent,
  kDecodeError,
  // The batch envelope's dp_rank is outside the source's declared range
  // (--source dp_ranks=N, default 1): the whole batch, counted per event.
  kRankOutOfRange,
  // The source already holds --max-blocks-per-tier blocks on the event's
  // tier: the stored event is not indexed (counts blocks).
  kBlockCap,
  kCount,  // not a reason: the number of enumerators
};

inline constexpr int kNumDropReasons = static_cast<int>(DropReason::kCount);

// The metric label, e.g. "block_size_mismatch"; "none" for kNone.
std::string_view DropReasonLabel(DropReason reason);

// True for reasons counted per block rather than per event.
bool DropReasonCountsBlocks(DropReason reason);

}  // namespace kvindex
