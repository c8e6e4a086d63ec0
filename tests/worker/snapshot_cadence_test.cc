// The snapshot cadence (worker/snapshot_cadence.h) on made-up step times and costs.
#include "worker/snapshot_cadence.h"

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Steps of `step_s` until Due says yes; then a snapshot of `cost` is taken. Returns the steps.
int StepsToNext(SnapshotCadence& c, double step_s, double cost) {
  int steps = 0;
  while (!c.Due(step_s)) {
    if (++steps > SnapshotCadence::kMaxEvery) return -1;
  }
  c.Began();
  c.Measured(cost);
  return steps + 1;
}

TEST(SnapshotCadenceTest, TheFirstTwoStepsAreSnapshotsThenTheBudgetSetsTheInterval) {
  SnapshotCadence c(0.02, 0);
  EXPECT_EQ(StepsToNext(c, 0.1, 0.5), 1) << "maps the slots: its cost is not a measure";
  EXPECT_EQ(StepsToNext(c, 0.1, 0.01), 1) << "the first measure";
  // 10 ms per snapshot against 2% of 100 ms: every 5 steps, reached by doubling.
  EXPECT_EQ(StepsToNext(c, 0.1, 0.01), 2);
  EXPECT_EQ(StepsToNext(c, 0.1, 0.01), 4);
  EXPECT_EQ(StepsToNext(c, 0.1, 0.01), 5);
  EXPECT_EQ(StepsToNext(c, 0.1, 0.01), 5);
  EXPECT_EQ(c.every(), 5);
}

TEST(SnapshotCadenceTest, OneSlowSnapshotDoesNotStretchTheInterval) {
  // The node-loss bench's case: the first measured snapshot waited 174 ms in the replica check,
  // then they cost about 10 ms on a 230 ms step.
  SnapshotCadence c(0.02, 0);
  StepsToNext(c, 0.23, 0.1);
  StepsToNext(c, 0.23, 0.174);
  int steps = 0;
  for (int i = 0; i < 6; ++i) steps += StepsToNext(c, 0.23, 0.010);
  EXPECT_EQ(c.every(), 3) << "10 ms / (2% of 230 ms) = 2.2 -> 3";
  EXPECT_LE(steps, 20) << "six snapshots within 20 steps, not one every 38";
  // A lasting change is followed: the median moves once most of the window has it.
  for (int i = 0; i < 5; ++i) StepsToNext(c, 0.23, 0.046);
  EXPECT_EQ(c.every(), 10);
}

TEST(SnapshotCadenceTest, ForcedEveryIgnoresCosts) {
  SnapshotCadence c(0.02, 4);
  EXPECT_EQ(StepsToNext(c, 0.1, 10.0), 4);
  EXPECT_EQ(StepsToNext(c, 0.1, 10.0), 4);
  EXPECT_EQ(c.every(), 4);
}

TEST(SnapshotCadenceTest, TheIntervalIsBounded) {
  SnapshotCadence c(0.02, 0);
  StepsToNext(c, 1e-6, 100.0);
  for (int i = 0; i < 20; ++i) StepsToNext(c, 1e-6, 100.0);
  EXPECT_EQ(c.every(), SnapshotCadence::kMaxEvery);
  EXPECT_DOUBLE_EQ(c.estimated_cost(), 100.0);
}

}  // namespace
}  // namespace dtrun::worker
