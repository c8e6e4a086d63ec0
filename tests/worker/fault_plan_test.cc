// The test-only faults (worker/fault_plan.h): their values are parsed strictly (a typo arms
// nothing and says so), they apply to their own rank only, and a flip happens once.
#include "worker/fault_plan.h"

#include <stdlib.h>

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace dtrun::worker {
namespace {

TEST(FaultPlanTest, ValuesParseInTheirOneFormAndEverythingElseIsRefusedWithTheForm) {
  absl::StatusOr<SlowFault> slow = ParseSlowFault("1:20:150");
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_EQ(slow->rank, 1);
  EXPECT_EQ(slow->from_step, 20);
  EXPECT_EQ(slow->ms, 150);
  absl::StatusOr<FlipFault> flip = ParseFlipFault("0:30:layer1.0.conv1.weight:30");
  ASSERT_TRUE(flip.ok()) << flip.status();
  EXPECT_EQ(flip->param, "layer1.0.conv1.weight");
  EXPECT_EQ(flip->bit, 30);

  for (const char* bad : {"", "1:20", "1:20:0", "1:20:60001", "-1:20:5", "x:1:5", "1:2:3:4", "1:20:15O"}) {
    EXPECT_THAT(ParseSlowFault(bad), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                                 ::testing::HasSubstr("RANK:FROM_STEP:MS")))
        << bad;
  }
  for (const char* bad : {"0:30:fc.weight", "0:0:fc.weight:3", "0:30::3", "0:30:fc.weight:64", "0:30:fc.weight:-1"}) {
    EXPECT_THAT(ParseFlipFault(bad), ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_))
        << bad;
  }
  EXPECT_THAT(ParseFlipFault("0:30:" + std::string(300, 'p') + ":3"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));  // a name is bounded
  absl::StatusOr<KillFault> kill = ParseKillFault("2:10");
  ASSERT_TRUE(kill.ok()) << kill.status();
  EXPECT_EQ(kill->rank, 2);
  EXPECT_EQ(kill->step, 10);
  EXPECT_EQ(kill->how, KillFault::How::kSigkill);
  absl::StatusOr<KillFault> segv = ParseKillFault("1:4:segv");
  ASSERT_TRUE(segv.ok()) << segv.status();
  EXPECT_EQ(segv->how, KillFault::How::kSegfault);
  absl::StatusOr<KillFault> thrown = ParseKillFault("1:4:throw");
  ASSERT_TRUE(thrown.ok()) << thrown.status();
  EXPECT_EQ(thrown->how, KillFault::How::kThrow);
  absl::StatusOr<KillFault> early = ParseKillFault("1:4:before-backward");
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->how, KillFault::How::kSigkillBeforeBackward);
  const FaultPlan plan(std::nullopt, std::nullopt, /*rank=*/1, *early);
  EXPECT_TRUE(plan.KillBeforeBackward(4));
  EXPECT_FALSE(plan.KillAfter(4)) << "it dies before that step's optimizer step, not after";
  EXPECT_FALSE(FaultPlan(std::nullopt, std::nullopt, 1, *kill).KillBeforeBackward(10));
  for (const char* bad : {"", "2", "2:0", "2:10:1", "-1:10", "2:x", "2:10:segv:1", "2:10:SEGV", "2:10:before"}) {
    EXPECT_THAT(ParseKillFault(bad),
                ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("RANK:STEP")))
        << bad;
  }
}

TEST(FaultPlanTest, FaultsApplyToTheirRankOnlyTheSlowOneFromItsStepTheFlipOnce) {
  const SlowFault slow{1, 20, 150};
  const FlipFault flip{1, 30, "fc.weight", 3};
  FaultPlan other(slow, flip, /*rank=*/0);
  EXPECT_EQ(other.SlowMsBefore(25), 0);
  EXPECT_FALSE(other.FlipAfter(30).has_value());

  FaultPlan mine(slow, flip, /*rank=*/1);
  EXPECT_EQ(mine.SlowMsBefore(19), 0);
  EXPECT_EQ(mine.SlowMsBefore(20), 150);
  EXPECT_EQ(mine.SlowMsBefore(1000), 150);
  EXPECT_FALSE(mine.FlipAfter(29).has_value());
  ASSERT_TRUE(mine.FlipAfter(30).has_value());
  EXPECT_FALSE(mine.FlipAfter(30).has_value());  // once: a restored job that reaches 30 again is clean
}

TEST(FaultPlanTest, AnUnparsableVariableArmsNothing) {
  setenv("DTRUN_FAULT_SLOW", "1:20", 1);
  setenv("DTRUN_FAULT_FLIP", "0:30:fc.weight:3", 1);
  FaultPlan plan = FaultPlan::FromEnvironment(0);
  unsetenv("DTRUN_FAULT_SLOW");
  unsetenv("DTRUN_FAULT_FLIP");
  EXPECT_EQ(plan.SlowMsBefore(100), 0);
  EXPECT_TRUE(plan.FlipAfter(30).has_value());  // the other, well-formed one is armed
}

TEST(FaultPlanTest, AFlipAndAKillAreArmedInTheFirstAttemptOnlyASlowdownInEvery) {
  setenv("DTRUN_FAULT_SLOW", "0:20:5", 1);
  setenv("DTRUN_FAULT_FLIP", "0:30:fc.weight:3", 1);
  setenv("DTRUN_FAULT_KILL", "0:31", 1);
  FaultPlan first = FaultPlan::FromEnvironment(0, /*restart_count=*/0);
  FaultPlan later = FaultPlan::FromEnvironment(0, /*restart_count=*/1);
  FaultPlan other_rank = FaultPlan::FromEnvironment(1, /*restart_count=*/0);
  unsetenv("DTRUN_FAULT_SLOW");
  unsetenv("DTRUN_FAULT_FLIP");
  unsetenv("DTRUN_FAULT_KILL");
  EXPECT_FALSE(first.KillAfter(30));
  EXPECT_TRUE(first.KillAfter(31));
  EXPECT_FALSE(other_rank.KillAfter(31));
  EXPECT_FALSE(later.FlipAfter(30).has_value()) << "the attempt that went back past the flip met it again";
  EXPECT_FALSE(later.KillAfter(31)) << "the attempt after the kill would die again";
  EXPECT_EQ(later.SlowMsBefore(20), 5);
}

TEST(FaultPlanTest, AFlipChangesExactlyTheOneBitInsideTheElement) {
  float x = 1.0f;
  uint32_t before = 0, after = 0;
  std::memcpy(&before, &x, 4);
  ASSERT_TRUE(FlipBit(&x, sizeof x, 30));  // an exponent bit: 1.0 becomes a huge number
  std::memcpy(&after, &x, 4);
  EXPECT_EQ(before ^ after, 1u << 30);
  EXPECT_FALSE(FlipBit(&x, sizeof x, 32));
  std::memcpy(&before, &x, 4);
  EXPECT_EQ(before, after);  // unchanged by the refused flip
}

}  // namespace
}  // namespace dtrun::worker
