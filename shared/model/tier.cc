#include "shared/model/tier.h"

namespace kvindex {
namespace {

struct MediumRow {
  std::string_view medium;
  Tier tier;
};

// semantics.md section 3, "Tier from medium (exact match)".
constexpr MediumRow kMediumTable[] = {
    {"GPU", Tier::kDevice},       {"DEVICE", Tier::kDevice},     {"CPU", Tier::kHost},
    {"CPU_PINNED", Tier::kHost},  {"CPU_TIER1", Tier::kHost},    {"CPU_TIER2", Tier::kDisk},
    {"DISK", Tier::kDisk},        {"NVME", Tier::kDisk},         {"STORAGE", Tier::kDisk},
    {"FS", Tier::kDisk},          {"EXTERNAL", Tier::kExternal}, {"SHARED", Tier::kExternal},
    {"NETWORK", Tier::kExternal}, {"OBJ", Tier::kExternal},
};

constexpr std::string_view kTierNames[kNumTiers] = {"device", "host", "disk", "external"};

}  // namespace

std::string_view TierName(Tier tier) { return kTierNames[static_cast<int>(tier)]; }

std::optional<Tier> TierFromName(std::string_view name) {
  for (int i = 0; i < kNumTiers; ++i) {
    if (kTierNames[i] == name) return static_cast<Tier>(i);
  }
  return std::nullopt;
}

TierOrDrop TierFromMedium(std::optional<std::string_view> medium) {
  if (!medium.has_value()) return {Tier::kDevice, DropReason::kNone};
  for (const MediumRow& row : kMediumTable) {
    if (row.medium == *medium) return {row.tier, DropReason::kNone};
  }
  return {Tier::kDevice, DropReason::kUnknownMedium};
}

DropReason CheckLocality(std::optional<std::string_view> locality) {
  if (!locality.has_value() || *locality == "LOCAL") return DropReason::kNone;
  if (*locality == "REMOTE") return DropReason::kRemoteLocality;
  return DropReason::kUnknownLocality;
}

DropReason CheckGroup(const GroupFilter& filter, std::optional<int64_t> group_idx,
                      std::optional<std::string_view> spec_kind) {
  if (group_idx.has_value() && *group_idx != filter.group_idx) return DropReason::kGroupFiltered;
  if (spec_kind.has_value() && *spec_kind != filter.spec_kind) return DropReason::kGroupFiltered;
  return DropReason::kNone;
}

}  // namespace kvindex
