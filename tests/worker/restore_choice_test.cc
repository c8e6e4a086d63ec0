#include "worker/restore_choice.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace dtrun::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RestoreChoiceTest, AStepEveryRankHoldsIsRestoredByEachRankFromItsOwnCopy) {
  const SnapshotChoice c = ChooseSnapshot({{12, 10, -1, -1}, {10, 12, -1, -1}}, true);
  EXPECT_EQ(c.step, 12);
  EXPECT_EQ(c.source, -1);
  EXPECT_THAT(c.receivers, IsEmpty());
}

TEST(RestoreChoiceTest, ALostNodesRanksTakeTheSurvivorsNewerStepInsteadOfTheOldBuddyCopy) {
  // Ranks 2 and 3 were on the lost node: the spare holds only their buddy copies of step 10.
  const SnapshotChoice c = ChooseSnapshot({{19, 18, 10}, {19, 18, 10}, {10}, {10}}, true);
  EXPECT_EQ(c.step, 19);
  EXPECT_EQ(c.source, 0);
  EXPECT_THAT(c.receivers, ElementsAre(2, 3));
}

TEST(RestoreChoiceTest, WithoutPeersOnlyAStepEveryRankHoldsCounts) {
  const SnapshotChoice c = ChooseSnapshot({{19, 18, 10}, {19, 18, 10}, {10}, {10}}, false);
  EXPECT_EQ(c.step, 10);
  EXPECT_EQ(c.source, -1);
}

TEST(RestoreChoiceTest, ARankThatDiedMidSnapshotReceivesTheStepItsPeerCompleted) {
  const SnapshotChoice c = ChooseSnapshot({{-1, -1}, {21, 18}}, true);
  EXPECT_EQ(c.step, 21);
  EXPECT_EQ(c.source, 1);
  EXPECT_THAT(c.receivers, ElementsAre(0));
}

TEST(RestoreChoiceTest, ALoneHolderOfANewerStepDoesNotDecideForTheRest) {
  // Rank 3 kept step 40 from steps the job has since gone back past; the others are at 36.
  const SnapshotChoice c = ChooseSnapshot({{36, 32}, {36, 32}, {36, 32}, {40, 36}}, true);
  EXPECT_EQ(c.step, 36);
  EXPECT_EQ(c.source, -1);
}

// An elastic job that grew from 1 rank to 4 (its new nodes hold nothing): the one holder's state
// goes to the three new ranks. Ranks that hold nothing have no say in the quorum.
TEST(RestoreChoiceTest, AWorldThatGrewPastTwiceItsSizeTakesTheOldWorldsState) {
  const SnapshotChoice c = ChooseSnapshot({{30, 27}, {-1}, {}, {-1, -1}}, true);
  EXPECT_EQ(c.step, 30);
  EXPECT_EQ(c.source, 0);
  EXPECT_EQ(c.receivers, (std::vector<int>{1, 2, 3}));
  // Ranks that hold older steps still count: a lone newer holder among them does not decide.
  EXPECT_EQ(ChooseSnapshot({{40, 36}, {36}, {36}, {}}, true).step, 36);
}

// Each node's --snapshot-dir copy of a job killed on every node at once: the agents copy on their
// own clocks, so each holds another step of the same line, and no step is held by half of them.
TEST(RestoreChoiceTest, WithNoStepHeldByHalfTheSnapshotCompletedLastIsTaken) {
  const SnapshotChoice c =
      ChooseSnapshot({{290, -1}, {280, -1}, {270, -1}}, true, {{9000, -1}, {8700, -1}, {8400, -1}});
  EXPECT_EQ(c.step, 290);
  EXPECT_EQ(c.source, 0);
  EXPECT_THAT(c.receivers, ElementsAre(1, 2));
  EXPECT_TRUE(c.completed_last);
  // A stale line's higher step, completed before the job went back past it, loses to the line the
  // job went on with.
  EXPECT_EQ(ChooseSnapshot({{500}, {300}, {290}}, true, {{1000}, {9000}, {8700}}).step, 300);
  // A tie in time goes to the higher step.
  EXPECT_EQ(ChooseSnapshot({{5}, {6}, {4}}, true, {{70}, {70}, {60}}).step, 6);
  // A step held by enough ranks still decides, and says so.
  EXPECT_FALSE(ChooseSnapshot({{7}, {7}}, true, {{5}, {5}}).completed_last);
  // Without times, or without peers: disk.
  EXPECT_EQ(ChooseSnapshot({{290}, {280}, {270}}, true).step, -1);
  EXPECT_EQ(ChooseSnapshot({{290}, {280}, {270}}, false, {{3}, {2}, {1}}).step, -1);
}

TEST(RestoreChoiceTest, NothingHeldAnywhereMeansDisk) {
  EXPECT_EQ(ChooseSnapshot({{-1}, {-1}}, true).step, -1);
  EXPECT_EQ(ChooseSnapshot({}, true).step, -1);
  // Held by some ranks only, and peers off: disk too.
  EXPECT_EQ(ChooseSnapshot({{5}, {}}, false).step, -1);
}

TEST(RestoreChoiceTest, ADeclaredCopySizeIsCheckedAgainstThisRanksSlotBeforeAnythingIsAllocated) {
  EXPECT_TRUE(CheckPeerCopySize(4096, 4096, 0).ok());
  const absl::Status unread = CheckPeerCopySize(-1, 4096, 2);
  EXPECT_EQ(unread.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(unread.message()), ::testing::HasSubstr("rank 2 could not read its copy"));
  // A size no slot holds (a peer's bug, or a rank whose --snapshot-memory is larger).
  for (int64_t size : {int64_t{4097}, int64_t{1} << 62}) {
    const absl::Status big = CheckPeerCopySize(size, 4096, 0);
    EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(big.message()), ::testing::HasSubstr("--snapshot-memory"));
  }
}

}  // namespace
}  // namespace dtrun::worker
