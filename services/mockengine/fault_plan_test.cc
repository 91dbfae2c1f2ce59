#include "services/mockengine/fault_plan.h"

#include <gtest/gtest.h>

namespace kvindex::mockengine {
namespace {

std::vector<size_t> Positions(uint64_t seed, FaultSpec spec, size_t requests) {
  std::array<FaultSpec, kNumFaultKinds> specs{};
  specs[static_cast<int>(FaultKind::kGap)] = spec;
  FaultPlan plan(specs, seed, requests);
  std::vector<size_t> at;
  for (size_t r = 0; r < requests; ++r) {
    plan.OnRequest(r);
    EXPECT_FALSE(plan.Fire(FaultKind::kDrop));  // other kinds stay off
    if (plan.Fire(FaultKind::kGap)) at.push_back(r);
  }
  EXPECT_EQ(plan.injected(FaultKind::kGap), at.size());
  return at;
}

TEST(FaultPlanTest, ParsesCountsAndRates) {
  EXPECT_EQ(ParseFaultSpec("3")->count, 3u);
  EXPECT_TRUE(ParseFaultSpec("3")->exact);
  EXPECT_FALSE(ParseFaultSpec("")->enabled());
  EXPECT_FALSE(ParseFaultSpec("0")->enabled());
  EXPECT_DOUBLE_EQ(ParseFaultSpec("0.5%")->rate, 0.005);
  EXPECT_DOUBLE_EQ(ParseFaultSpec("0.005")->rate, 0.005);
  EXPECT_FALSE(ParseFaultSpec("0.005")->exact);
  EXPECT_FALSE(ParseFaultSpec("x").ok());
  EXPECT_FALSE(ParseFaultSpec("150%").ok());
  EXPECT_FALSE(ParseFaultSpec("-1").ok());
}

TEST(FaultPlanTest, ExactCountsAreMetAndSeeded) {
  const auto a = Positions(7, *ParseFaultSpec("5"), 1000);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(Positions(7, *ParseFaultSpec("5"), 1000), a);          // reproducible
  EXPECT_NE(Positions(8, *ParseFaultSpec("5"), 1000), a);          // and seeded
  EXPECT_EQ(Positions(7, *ParseFaultSpec("20"), 10).size(), 10u);  // one per request at most here
}

TEST(FaultPlanTest, RatesAreSeededAndNearTheirValue) {
  const auto a = Positions(3, *ParseFaultSpec("2%"), 20000);
  EXPECT_GT(a.size(), 300u);
  EXPECT_LT(a.size(), 500u);
  EXPECT_EQ(Positions(3, *ParseFaultSpec("2%"), 20000), a);
}

TEST(FaultPlanTest, DueFaultWaitsForABatch) {
  std::array<FaultSpec, kNumFaultKinds> specs{};
  specs[static_cast<int>(FaultKind::kRestart)] = *ParseFaultSpec("1");
  FaultPlan plan(specs, 1, 1);
  plan.OnRequest(0);
  EXPECT_TRUE(plan.any());
  EXPECT_TRUE(plan.Fire(FaultKind::kRestart));
  EXPECT_FALSE(plan.Fire(FaultKind::kRestart));
  EXPECT_EQ(FaultKindName(FaultKind::kSlow), "slow");
}

}  // namespace
}  // namespace kvindex::mockengine
