#include "agent/recovery_tracker.h"

#include "gtest/gtest.h"

namespace dtrun {
namespace {

using Clock = RecoveryTracker::Clock;
using std::chrono::milliseconds;

TEST(RecoveryTrackerTest, PhasesAreTimedFromTheFailureToEveryLocalRankStepping) {
  RecoveryTracker t;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  EXPECT_FALSE(t.OnStep(0, 5, t0).has_value());  // no failure yet
  t.OnFailure(t0, 12);
  t.OnFailure(t0 + milliseconds(50), 99);  // the same recovery: the first call counts
  t.OnStopped(t0 + milliseconds(100));
  t.OnStarted(t0 + milliseconds(110), 2);
  t.OnRestored(0, "memory", 11, t0 + milliseconds(700));
  EXPECT_FALSE(t.OnStep(0, 12, t0 + milliseconds(800)).has_value());  // rank 1 not yet
  t.OnRestored(1, "memory", 11, t0 + milliseconds(750));
  EXPECT_FALSE(t.OnStep(1, 11, t0 + milliseconds(810)).has_value());  // its restored step, not a new one
  std::optional<Recovery> r = t.OnStep(1, 12, t0 + milliseconds(900));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->stopped, milliseconds(100));
  EXPECT_EQ(r->started, milliseconds(110));
  EXPECT_EQ(r->restored, milliseconds(750));
  EXPECT_EQ(r->stepping, milliseconds(900));
  EXPECT_EQ(r->source, "memory");
  EXPECT_EQ(r->restored_step, 11);
  EXPECT_EQ(r->lost_steps(), 1);
  EXPECT_FALSE(t.active());
  EXPECT_FALSE(t.OnStep(0, 13, t0 + milliseconds(950)).has_value());  // over
}

TEST(RecoveryTrackerTest, WorkersThatSayNothingCountFromTheirFirstStep) {
  RecoveryTracker t;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  t.OnFailure(t0, -1);
  t.OnStarted(t0 + milliseconds(10), 1);
  t.OnRestored(5, "disk", 3, t0);  // not a local rank of this node: ignored
  std::optional<Recovery> r = t.OnStep(0, 1, t0 + milliseconds(300));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->source, "none");
  EXPECT_EQ(r->lost_steps(), 0);
  EXPECT_EQ(r->restored, milliseconds(300));
}

// Heartbeats counted from 0 and snapshots from 1: the kept state of 23 steps is a step past the
// last heartbeat (22). Nothing was lost, and the count says so rather than -1.
TEST(RecoveryTrackerTest, AStateRestoredPastTheLastReportedStepLostNothing) {
  RecoveryTracker t;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  t.OnFailure(t0, 22);
  t.OnStarted(t0, 1);
  t.OnRestored(0, "peer", 23, t0);
  std::optional<Recovery> r = t.OnStep(0, 24, t0 + milliseconds(100));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->lost_steps(), 0);
}

TEST(RecoveryTrackerTest, TheSummaryLineAddsUpEveryRecovery) {
  EXPECT_EQ(FormatRecoveries({}), "");
  RecoveryTracker t;
  const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  const struct {
    const char* source;
    int64_t before, restored;
    int ms;
  } runs[] = {{"memory", 12, 11, 3000}, {"disk", 40, 30, 4000}, {"memory", 60, 60, 3500}};
  for (const auto& run : runs) {
    t.OnFailure(t0, run.before);
    t.OnStarted(t0, 1);
    t.OnRestored(0, run.source, run.restored, t0);
    ASSERT_TRUE(t.OnStep(0, run.restored + 1, t0 + milliseconds(run.ms)).has_value());
  }
  ASSERT_EQ(t.completed().size(), 3u);
  EXPECT_EQ(FormatRecoveries(t.completed()),
            "recoveries on this node: 3 (disk 1, memory 2); 11 step(s) of work lost in all; every local rank "
            "stepping again 3.50 s after a failure (median), 4.00 s at most");
}

}  // namespace
}  // namespace dtrun
