#include "progress/progress_board.h"

#include "gtest/gtest.h"

namespace dtrun::progress {
namespace {

using std::chrono::seconds;

Report Beat(int64_t step) {
  Report r;
  r.kind = Report::Kind::kBeat;
  r.step = step;
  r.samples = step * 8;
  return r;
}
Report Section(Report::Kind kind, const std::string& name) {
  Report r;
  r.kind = kind;
  r.name = name;
  return r;
}

class ProgressBoardTest : public ::testing::Test {
 protected:
  Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);
  ProgressBoard board{2};
  HangPolicy policy;
};

TEST_F(ProgressBoardTest, SyncReportsKeepTheNewestWaitsWithRisingSteps) {
  auto sync = [](int64_t step, int64_t wait_us) {
    Report r;
    r.kind = Report::Kind::kSync;
    r.step = step;
    r.wait_micros = wait_us;
    r.step_micros = 200000;
    return r;
  };
  for (int64_t s = 1; s <= 100; ++s) board.Apply(1, sync(s, s), t0);
  board.Apply(1, sync(50, 7), t0);   // a step back: dropped
  board.Apply(1, sync(100, 7), t0);  // a repeat: dropped
  const std::deque<SyncWait>& waits = board.ranks()[1].waits;
  ASSERT_EQ(waits.size(), kMaxRecentWaits);
  EXPECT_EQ(waits.front().step, 100 - static_cast<int64_t>(kMaxRecentWaits) + 1);
  EXPECT_EQ(waits.back().step, 100);
  EXPECT_DOUBLE_EQ(waits.back().wait_s, 100e-6);
  EXPECT_DOUBLE_EQ(waits.back().step_s, 0.2);
  EXPECT_TRUE(board.ranks()[1].active);
  EXPECT_EQ(board.ranks()[1].step, -1) << "a sync report is not a step report";
  EXPECT_TRUE(board.ranks()[0].waits.empty());
}

TEST_F(ProgressBoardTest, ARankThatNeverBeatIsNeverHung) {
  policy.heartbeat_timeout = seconds(5);
  Report hello;
  hello.kind = Report::Kind::kHello;
  board.Apply(0, hello, t0);  // start-up may take long before the first step
  EXPECT_FALSE(board.FindHang(policy, t0 + std::chrono::hours(2)));
  EXPECT_FALSE(board.NextDeadline(policy));
}

TEST_F(ProgressBoardTest, TheHeartbeatTimeoutNamesTheSilentRankItsStepAndHowLong) {
  policy.heartbeat_timeout = seconds(5);
  board.Apply(0, Beat(10), t0);
  board.Apply(1, Beat(10), t0);
  board.Apply(0, Beat(11), t0 + seconds(4));
  EXPECT_FALSE(board.FindHang(policy, t0 + seconds(4)));
  EXPECT_EQ(*board.NextDeadline(policy), t0 + seconds(5));
  std::optional<Hang> h = board.FindHang(policy, t0 + seconds(6));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->local_rank, 1);
  EXPECT_EQ(h->step, 10);
  EXPECT_EQ(h->rule, "heartbeat");
  EXPECT_EQ(h->stuck_for, seconds(6));
  EXPECT_EQ(board.best_step(), 11);
}

// A rank that reported its last step, or whose peer exited successfully, is tearing down: it sends
// no more heartbeats, and a busy machine can make that take longer than the heartbeat timeout.
TEST_F(ProgressBoardTest, AfterTheLastStepTheTeardownBoundRulesNotTheHeartbeat) {
  policy.heartbeat_timeout = seconds(1);
  policy.teardown_timeout = seconds(60);
  Report total;
  total.kind = Report::Kind::kTotal;
  total.total_steps = 100;
  board.Apply(0, total, t0);
  board.Apply(0, Beat(99), t0);  // its last step (steps counted from 0 or 1)
  board.Apply(1, Beat(98), t0);
  std::optional<Hang> rank1 = board.FindHang(policy, t0 + seconds(2));
  ASSERT_TRUE(rank1);
  EXPECT_EQ(rank1->local_rank, 1) << "rank 0 is past its last step";
  EXPECT_EQ(rank1->rule, "heartbeat");
  // Rank 0 exited successfully at t0+1 s: rank 1 is tearing down too, from then or its last report.
  const Clock::time_point done = t0 + seconds(1);
  EXPECT_FALSE(board.FindHang(policy, t0 + seconds(30), done));
  EXPECT_EQ(*board.NextDeadline(policy, done), t0 + seconds(60));
  std::optional<Hang> late = board.FindHang(policy, t0 + seconds(62), done);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->local_rank, 0);
  EXPECT_EQ(late->rule, "teardown");
  EXPECT_EQ(late->stuck_for, seconds(62));
  // No bound: a rank that is tearing down is never hung by the heartbeat rule.
  policy.teardown_timeout.reset();
  EXPECT_FALSE(board.FindHang(policy, t0 + std::chrono::hours(1), done));
}

TEST_F(ProgressBoardTest, ASectionWithItsOwnTimeoutOutlastsTheHeartbeatTimeout) {
  policy.heartbeat_timeout = seconds(5);
  policy.section_timeouts["checkpoint"] = seconds(600);
  board.Apply(0, Beat(3), t0);
  board.Apply(0, Section(Report::Kind::kBegin, "checkpoint"), t0 + seconds(1));
  EXPECT_FALSE(board.FindHang(policy, t0 + seconds(300)));  // a long checkpoint is not a hang
  std::optional<Hang> h = board.FindHang(policy, t0 + seconds(602));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->section, "checkpoint");
  EXPECT_EQ(h->rule, "section");
  EXPECT_EQ(h->stuck_for, seconds(601));
  board.Apply(0, Section(Report::Kind::kEnd, "checkpoint"), t0 + seconds(400));
  EXPECT_FALSE(board.FindHang(policy, t0 + seconds(404)));  // back under the heartbeat rule
  EXPECT_TRUE(board.FindHang(policy, t0 + seconds(406)));
}

TEST_F(ProgressBoardTest, AStepSectionTimeoutCatchesAStuckStepEvenWithoutAHeartbeatTimeout) {
  policy.section_timeouts["step"] = seconds(30);
  board.Apply(1, Section(Report::Kind::kBegin, "step"), t0);
  board.Apply(1, Section(Report::Kind::kEnd, "step"), t0 + seconds(1));
  EXPECT_FALSE(board.FindHang(policy, t0 + std::chrono::hours(5)));  // between steps: no rule
  board.Apply(1, Section(Report::Kind::kBegin, "step"), t0 + seconds(2));
  std::optional<Hang> h = board.FindHang(policy, t0 + seconds(33));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->local_rank, 1);
}

TEST_F(ProgressBoardTest, EndClosesTheInnermostSectionOfThatNameAndOpenSectionsAreBounded) {
  for (int i = 0; i < 20; ++i) board.Apply(0, Section(Report::Kind::kBegin, "s" + std::to_string(i)), t0);
  EXPECT_EQ(board.ranks()[0].sections.size(), kMaxOpenSections);
  board.Apply(0, Section(Report::Kind::kEnd, "s2"), t0);
  EXPECT_EQ(board.ranks()[0].sections.size(), 2u);
  board.Apply(0, Section(Report::Kind::kEnd, "never-opened"), t0);
  EXPECT_EQ(board.ranks()[0].sections.size(), 2u);
}

TEST_F(ProgressBoardTest, RatesComeFromWindowsOfAtLeastTwoSeconds) {
  board.Apply(0, Beat(0), t0);
  board.Apply(0, Beat(5), t0 + seconds(1));
  EXPECT_EQ(board.ranks()[0].steps_per_s, 0);
  board.Apply(0, Beat(20), t0 + seconds(2));
  EXPECT_DOUBLE_EQ(board.ranks()[0].steps_per_s, 10);
  EXPECT_DOUBLE_EQ(board.ranks()[0].samples_per_s, 80);
}

}  // namespace
}  // namespace dtrun::progress
