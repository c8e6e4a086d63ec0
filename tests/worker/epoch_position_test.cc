#include "worker/epoch_position.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "worker/data/sampler.h"

namespace dtrun::worker {
namespace {

// The samples the job has trained after `steps` steps of every rank of a world, `batch` a rank.
std::multiset<size_t> Trained(size_t n, int64_t epoch, int world, int64_t batch, int64_t steps) {
  std::multiset<size_t> out;
  for (int r = 0; r < world; ++r) {
    const std::vector<size_t> mine = data::DistributedIndices(n, epoch, {r, world, true, 7, false, true});
    for (int64_t i = 0; i < steps * batch && i < static_cast<int64_t>(mine.size()); ++i) out.insert(mine[i]);
  }
  return out;
}

TEST(EpochPositionTest, AnUnchangedOrUnrecordedGlobalBatchKeepsThePosition) {
  EXPECT_EQ(NextBatchAtGlobalBatch(40, 512, 512), 40);
  EXPECT_EQ(NextBatchAtGlobalBatch(40, 0, 512), 40);  // a checkpoint from before it was recorded
  EXPECT_EQ(NextBatchAtGlobalBatch(0, 256, 512), 0);
}

TEST(EpochPositionTest, AWorldThatShrankGoesOnFurtherInItsLongerEpochAndOneThatGrewGoesBack) {
  EXPECT_EQ(NextBatchAtGlobalBatch(40, 4 * 32, 2 * 32), 80);  // 4 ranks -> 2
  EXPECT_EQ(NextBatchAtGlobalBatch(40, 2 * 32, 3 * 32), 26);  // 2 ranks -> 3: 2560 samples, 26 whole steps of 96
  EXPECT_EQ(NextBatchAtGlobalBatch(7, 1 * 64, 2 * 32), 7);    // another world and batch, the same samples a step
}

TEST(EpochPositionTest, HostileNumbersFromAFileNeitherOverflowNorGoNegative) {
  EXPECT_EQ(NextBatchAtGlobalBatch(INT64_MAX, INT64_MAX, 1), INT64_MAX);
  EXPECT_EQ(NextBatchAtGlobalBatch(INT64_MAX, INT64_MAX, INT64_MAX), INT64_MAX);
  EXPECT_EQ(NextBatchAtGlobalBatch(-5, 64, 32), -5);
  EXPECT_EQ(NextBatchAtGlobalBatch(5, -64, 32), 5);
  EXPECT_EQ(NextBatchAtGlobalBatch(5, 64, -32), 5);
}

TEST(EpochPositionTest, TheNewWorldRepeatsLessThanOneOfItsStepsAndSkipsNoSample) {
  const size_t n = 1000;
  for (int old_world : {1, 2, 3, 4}) {
    for (int new_world : {1, 2, 3, 5}) {
      for (int64_t old_batch : {4, 10}) {
        const int64_t new_batch = 6;
        for (int64_t done : {0, 1, 7, 20}) {
          const int64_t next = NextBatchAtGlobalBatch(done, old_world * old_batch, new_world * new_batch);
          const std::multiset<size_t> before = Trained(n, 3, old_world, old_batch, done);
          const std::multiset<size_t> again = Trained(n, 3, new_world, new_batch, next);
          // What the new world counts as done is within what was trained ...
          for (size_t s : again) EXPECT_TRUE(before.count(s) > 0) << old_world << "->" << new_world << " at " << done;
          // ... and falls short of it by less than one of its steps.
          EXPECT_LT(before.size() - again.size(), static_cast<size_t>(new_world * new_batch))
              << old_world << "->" << new_world << " at " << done;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrun::worker
