// Hang detection's decisions (agent/hang_rules.h) on made-up stacks and times.
#include "agent/hang_rules.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using ::testing::HasSubstr;

progress::Hang HangOf(const std::string& rule, Millis stuck, Millis limit, int64_t step,
                      const std::string& section = "") {
  progress::Hang h;
  h.rule = rule;
  h.stuck_for = stuck;
  h.limit = limit;
  h.step = step;
  h.section = section;
  return h;
}

TEST(HangRulesTest, EachRuleIsSaidWithTheFlagThatSetItsLimit) {
  EXPECT_EQ(DescribeHang(HangOf("heartbeat", Millis(6200), Millis(5000), 12)),
            "no progress report for 6.2 s (--heartbeat-timeout 5), after step 12");
  EXPECT_EQ(DescribeHang(HangOf("section", Millis(31000), Millis(30000), -1, "eval")),
            "stuck in section 'eval' for 31.0 s (--section-timeout eval=30), before its first step");
  EXPECT_THAT(DescribeHang(HangOf("teardown", Millis(301000), Millis(300000), 99)),
              HasSubstr("still exiting 301.0 s after its last step or a finished peer (--teardown-timeout 300)"));
  EXPECT_EQ(DescribeDState(HangOf("dstate", Millis(31000), Millis(30000), 4), "nfs_wait"),
            "in uninterruptible sleep (D state) for at least 31.0 s in nfs_wait (--dstate-timeout 30)");
  EXPECT_THAT(DescribeDState(HangOf("dstate", Millis(31000), Millis(30000), 4), "0"),
              ::testing::Not(HasSubstr(" in 0")));
}

TEST(HangRulesTest, ARankOutsideTheCollectiveIsBlamedOverTheOneDetectedWaiting) {
  // Local rank 0 was detected first, but it waits in all-reduce for rank 1, which is elsewhere.
  HangBlame b = BlameHang(0, Millis(5000), {{0, true}, {1, false}}, {4, 5}, 2);
  EXPECT_EQ(b.local_rank, 1);
  EXPECT_THAT(b.note, HasSubstr("rank 5 outside torch.distributed while 1 local rank(s) wait"));
  EXPECT_FALSE(b.hold) << "this node holds the culprit: nothing to wait for";
}

TEST(HangRulesTest, WithoutReadableStacksTheDetectedRankIsNamed) {
  HangBlame b = BlameHang(1, Millis(5000), {{0, std::nullopt}, {1, std::nullopt}}, {0, 1}, 4);
  EXPECT_EQ(b.local_rank, 1);
  EXPECT_EQ(b.note, "");
  EXPECT_FALSE(b.hold);
  // Every rank elsewhere (a hang in user code, no collective): the detected one, at once.
  b = BlameHang(0, Millis(5000), {{0, false}, {1, false}}, {0, 1}, 4);
  EXPECT_EQ(b.local_rank, 0);
  EXPECT_FALSE(b.hold);
}

TEST(HangRulesTest, EveryRankWaitingHoldsTheReportOnlyWhenAnotherNodeMayKnowMore) {
  EXPECT_FALSE(BlameHang(0, Millis(5000), {{0, true}, {1, true}}, {0, 1}, 1).hold) << "a single node knows all";
  HangBlame b = BlameHang(0, Millis(20000), {{0, true}, {1, true}}, {0, 1}, 3);
  ASSERT_TRUE(b.hold);
  EXPECT_EQ(*b.hold, Millis(5000)) << "a quarter of the limit";
  EXPECT_EQ(*BlameHang(0, Millis(1000), {{0, true}}, {0}, 2).hold, Millis(1000)) << "at least 1 s";
  EXPECT_EQ(*BlameHang(0, Millis(600000), {{0, true}}, {0}, 2).hold, Millis(15000)) << "at most 15 s";
}

TEST(DStateTrackerTest, AThreadStuckAtEveryLookIsReportedOnceTheTimeoutPassed) {
  DStateTracker t(Millis(30000));
  EXPECT_EQ(t.interval(), Millis(3000));
  const Clock::time_point t0{};
  EXPECT_FALSE(t.Observe(7, {{70, 5}}, t0)) << "first sighting";
  EXPECT_FALSE(t.Observe(7, {{70, 5}}, t0 + Millis(29999))) << "not yet the timeout";
  std::optional<Clock::time_point> since = t.Observe(7, {{70, 5}}, t0 + Millis(30000));
  ASSERT_TRUE(since);
  EXPECT_EQ(*since, t0) << "stuck since the first look";
}

TEST(DStateTrackerTest, AThreadThatRanBetweenLooksStartsAgain) {
  DStateTracker t(Millis(1000));
  const Clock::time_point t0{};
  t.Observe(7, {{70, 5}}, t0);
  // Switched in between (its count moved): a fresh first sighting, not stuck since t0.
  EXPECT_FALSE(t.Observe(7, {{70, 6}}, t0 + Millis(2000)));
  EXPECT_FALSE(t.Observe(7, {{70, 6}}, t0 + Millis(2999)));
  EXPECT_TRUE(t.Observe(7, {{70, 6}}, t0 + Millis(3000)));
  // Out of D state: forgotten.
  EXPECT_FALSE(t.Observe(7, {}, t0 + Millis(4000)));
  EXPECT_FALSE(t.Observe(7, {{70, 6}}, t0 + Millis(9000)));
}

TEST(DStateTrackerTest, OnlyThreadsStuckAtBothLooksCountAndWorkersAreApart) {
  DStateTracker t(Millis(1000));
  const Clock::time_point t0{};
  t.Observe(7, {{70, 5}, {71, 1}}, t0);
  t.Observe(8, {{80, 1}}, t0);
  // Thread 71 ran; 70 is still stuck: the worker stays stuck since t0.
  EXPECT_EQ(t.Observe(7, {{70, 5}, {71, 2}}, t0 + Millis(1000)), t0);
  // Worker 8's thread ran: not stuck, and worker 7's state is not touched by it.
  EXPECT_FALSE(t.Observe(8, {{80, 2}}, t0 + Millis(1000)));
  t.Forget(7);
  EXPECT_FALSE(t.Observe(7, {{70, 5}}, t0 + Millis(5000))) << "forgotten: a first sighting again";
}

TEST(DStateTrackerTest, TheLookIntervalIsATenthOfTheTimeoutWithinBounds) {
  EXPECT_EQ(DStateTracker(Millis(200)).interval(), Millis(100));
  EXPECT_EQ(DStateTracker(Millis(600000)).interval(), Millis(5000));
}

}  // namespace
}  // namespace dtrun
