#include "agent/stop_deadline.h"

#include "gtest/gtest.h"

namespace dtrun {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kGrace{500};
constexpr milliseconds kTimeout{30000};

TEST(StopDeadlineTest, WithNobodyKeepingTheGraceEndsTheStop) {
  const StopDeadline::Clock::time_point t0{};
  StopDeadline d;
  d.Begin(t0, kGrace, kTimeout);
  EXPECT_EQ(d.deadline(), t0 + kGrace);
  EXPECT_FALSE(d.keeping());
}

TEST(StopDeadlineTest, AWorkerKeepingItsStateIsWaitedForUpToTheTimeoutThenTheGraceHoldsAgain) {
  const StopDeadline::Clock::time_point t0{};
  StopDeadline d;
  d.Begin(t0, kGrace, kTimeout);
  d.Keeping(0);
  d.Keeping(1);
  EXPECT_EQ(d.deadline(), t0 + kTimeout);
  d.Done(0);
  EXPECT_EQ(d.deadline(), t0 + kTimeout);  // rank 1 still writes
  d.Done(1);
  EXPECT_EQ(d.deadline(), t0 + kGrace);  // passed already: the frozen ones go at once
  EXPECT_EQ(d.waited(t0 + milliseconds(1830)), milliseconds(1830));
}

TEST(StopDeadlineTest, KeepingThatBeganBeforeTheStopCountsAndTheRoundsEndForgetsIt) {
  const StopDeadline::Clock::time_point t0{};
  StopDeadline d;
  d.Keeping(3);  // unwinding from a failed collective before the agent stopped anyone
  d.Begin(t0, kGrace, kTimeout);
  EXPECT_EQ(d.deadline(), t0 + kTimeout);
  d.Reset();
  d.Begin(t0, kGrace, kTimeout);
  EXPECT_EQ(d.deadline(), t0 + kGrace);
}

TEST(StopDeadlineTest, ATimeoutShorterThanTheGraceNeverShortensIt) {
  const StopDeadline::Clock::time_point t0{};
  StopDeadline d;
  d.Begin(t0, kTimeout, kGrace);  // an interrupt's stop: the grace is the whole timeout already
  d.Keeping(0);
  EXPECT_EQ(d.deadline(), t0 + kTimeout);
}

}  // namespace
}  // namespace dtrun
