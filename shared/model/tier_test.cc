#include "shared/model/tier.h"

#include <gtest/gtest.h>

#include <string>

#include "shared/model/drop_reason.h"

namespace kvindex {
namespace {

struct MediumCase {
  const char* medium;
  Tier tier;
};

TEST(TierTest, EveryKnownMediumMapsExactly) {
  const MediumCase cases[] = {
      {"GPU", Tier::kDevice},       {"DEVICE", Tier::kDevice},     {"CPU", Tier::kHost},
      {"CPU_PINNED", Tier::kHost},  {"CPU_TIER1", Tier::kHost},    {"CPU_TIER2", Tier::kDisk},
      {"DISK", Tier::kDisk},        {"NVME", Tier::kDisk},         {"STORAGE", Tier::kDisk},
      {"FS", Tier::kDisk},          {"EXTERNAL", Tier::kExternal}, {"SHARED", Tier::kExternal},
      {"NETWORK", Tier::kExternal}, {"OBJ", Tier::kExternal},
  };
  for (const auto& c : cases) {
    const TierOrDrop got = TierFromMedium(std::string_view(c.medium));
    EXPECT_EQ(got.drop, DropReason::kNone) << c.medium;
    EXPECT_EQ(got.tier, c.tier) << c.medium;
  }
}

TEST(TierTest, AbsentMediumIsDevice) {
  const TierOrDrop got = TierFromMedium(std::nullopt);
  EXPECT_EQ(got.drop, DropReason::kNone);
  EXPECT_EQ(got.tier, Tier::kDevice);
}

TEST(TierTest, UnknownEmptyAndWrongCaseMediumDrop) {
  for (const char* medium : {"", "gpu", "Cpu", "TAPE", "GPU "}) {
    EXPECT_EQ(TierFromMedium(std::string_view(medium)).drop, DropReason::kUnknownMedium) << medium;
  }
}

TEST(TierTest, Locality) {
  EXPECT_EQ(CheckLocality(std::nullopt), DropReason::kNone);
  EXPECT_EQ(CheckLocality("LOCAL"), DropReason::kNone);
  EXPECT_EQ(CheckLocality("REMOTE"), DropReason::kRemoteLocality);
  EXPECT_EQ(CheckLocality("local"), DropReason::kUnknownLocality);
  EXPECT_EQ(CheckLocality(""), DropReason::kUnknownLocality);
}

TEST(TierTest, GroupFilter) {
  const GroupFilter filter;
  EXPECT_EQ(CheckGroup(filter, std::nullopt, std::nullopt), DropReason::kNone);
  EXPECT_EQ(CheckGroup(filter, 0, "full_attention"), DropReason::kNone);
  EXPECT_EQ(CheckGroup(filter, 1, std::nullopt), DropReason::kGroupFiltered);
  EXPECT_EQ(CheckGroup(filter, std::nullopt, "sliding_window"), DropReason::kGroupFiltered);
  const GroupFilter other{.group_idx = 1, .spec_kind = "sliding_window"};
  EXPECT_EQ(CheckGroup(other, 1, "sliding_window"), DropReason::kNone);
}

TEST(TierTest, NamesRoundTrip) {
  for (Tier tier : kAllTiers) EXPECT_EQ(TierFromName(TierName(tier)), tier);
  EXPECT_EQ(TierFromName("gpu"), std::nullopt);
}

TEST(DropReasonTest, LabelsAreUniqueAndSnakeCase) {
  for (int i = 1; i < kNumDropReasons; ++i) {
    const std::string_view label = DropReasonLabel(static_cast<DropReason>(i));
    EXPECT_NE(label, "invalid");
    for (char ch : label) EXPECT_TRUE((ch >= 'a' && ch <= 'z') || ch == '_') << label;
    for (int j = i + 1; j < kNumDropReasons; ++j) {
      EXPECT_NE(label, DropReasonLabel(static_cast<DropReason>(j)));
    }
  }
  EXPECT_TRUE(DropReasonCountsBlocks(DropReason::kBlockNotFound));
  EXPECT_TRUE(DropReasonCountsBlocks(DropReason::kUnresolvedPlaceholder));
  EXPECT_FALSE(DropReasonCountsBlocks(DropReason::kParentNotFound));
}

}  // namespace
}  // namespace kvindex
