#include "worker/data/sampler.h"

#include <algorithm>
#include <set>

#include "gtest/gtest.h"

namespace dtrun::data {
namespace {

TEST(SamplerTest, RanksPartitionTheEpochWithPaddingToEqualLength) {
  const size_t n = 10;
  std::multiset<size_t> seen;
  for (int r = 0; r < 3; ++r) {
    SamplerOptions o{r, 3, true, 42, false};
    std::vector<size_t> mine = DistributedIndices(n, 5, o);
    EXPECT_EQ(mine.size(), 4u);  // ceil(10 / 3)
    seen.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(seen.size(), 12u);
  for (size_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << i;  // every sample at least once
}

TEST(SamplerTest, DropLastTrimsInsteadOfPadding) {
  SamplerOptions o{0, 3, false, 0, true};
  EXPECT_EQ(DistributedIndices(10, 0, o), (std::vector<size_t>{0, 3, 6}));
}

TEST(SamplerTest, ShuffleDependsOnSeedAndEpochOnly) {
  SamplerOptions o{1, 2, true, 9, false};
  EXPECT_EQ(DistributedIndices(100, 3, o), DistributedIndices(100, 3, o));
  EXPECT_NE(DistributedIndices(100, 3, o), DistributedIndices(100, 4, o));
  o.shuffle = false;
  EXPECT_EQ(DistributedIndices(6, 3, o), (std::vector<size_t>{1, 3, 5}));
}

}  // namespace
}  // namespace dtrun::data
