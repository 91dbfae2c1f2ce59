// Storage tiers and the engine vocabulary that maps onto them.
//
// The mapping tables (medium, locality, attention group) live in tier.cc,
// once, exactly as docs/semantics.md section 3 states them.
// Everything that normalizes engine events calls these functions; nothing
// else spells a medium string.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "shared/model/drop_reason.h"

namespace kvindex {

// Ordered fastest first: a block held in several tiers is attributed to the
// lowest value (semantics.md section 5).
enum class Tier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2, kExternal = 3 };
inline constexpr int kNumTiers = 4;
inline constexpr std::array<Tier, kNumTiers> kAllTiers = {Tier::kDevice, Tier::kHost, Tier::kDisk,
                                                          Tier::kExternal};

// "device", "host", "disk", "external": the names used in JSON and metrics.
std::string_view TierName(Tier tier);
std::optional<Tier> TierFromName(std::string_view name);

// Result of mapping an engine field: a tier, or the reason to drop.
struct TierOrDrop {
  Tier tier = Tier::kDevice;
  DropReason drop = DropReason::kNone;  // kNone = keep
};

// `medium`: nullopt means absent or nil (= device). Exact, case-sensitive
// match; "" and unknown strings drop with kUnknownMedium.
TierOrDrop TierFromMedium(std::optional<std::string_view> medium);

// `locality`: absent or "LOCAL" keep; "REMOTE" drops with kRemoteLocality;
// anything else with kUnknownLocality. Returns kNone to keep.
DropReason CheckLocality(std::optional<std::string_view> locality);

// Which KV-cache groups are indexed. Hybrid models share block hashes across
// groups, so one group (full attention, index 0) is enough.
struct GroupFilter {
  // Default: 0. Events whose group_idx is nil always pass.
  int64_t group_idx = 0;
  // Default: "full_attention". Events whose kind is nil always pass.
  std::string_view spec_kind = "full_attention";
};

// Returns kGroupFiltered when the event belongs to another group.
DropReason CheckGroup(const GroupFilter& filter, std::optional<int64_t> group_idx,
                      std::optional<std::string_view> spec_kind);

}  // namespace kvindex
