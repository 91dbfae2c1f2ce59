#include "shared/base/percentile.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvindex {
namespace {

TEST(PercentileTest, NearestRankOfAnUnsortedSample) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({7}, 0.99), 7);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, reversed
  EXPECT_EQ(Percentile(v, 0.50), 51);             // rank floor(0.5 * 100) = 50
  EXPECT_EQ(Percentile(v, 0.99), 100);
  EXPECT_EQ(Percentile(v, 1.0), 100);  // clamped to the last
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(v.front(), 100);  // the caller's sample is left as it was
}

}  // namespace
}  // namespace kvindex
