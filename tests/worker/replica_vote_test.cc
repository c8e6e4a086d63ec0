// The vote over the replicas' fingerprints (worker/replica_vote.h): agreement, the ranks that
// differ from a majority, and a tie that cannot say who is wrong.
#include "worker/replica_vote.h"

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

TEST(ReplicaVoteTest, EqualFingerprintsAgree) {
  EXPECT_TRUE(VoteOnFingerprints({7, 7, 7, 7}).agreed);
  EXPECT_TRUE(VoteOnFingerprints({7}).agreed);
  EXPECT_TRUE(VoteOnFingerprints({}).agreed);
}

TEST(ReplicaVoteTest, TheRanksThatDifferFromTheMajorityAreNamedWithTheirFingerprints) {
  const std::vector<uint64_t> by_rank = {0x91fe, 0x91fe, 0xab, 0x91fe, 0xcd, 0x91fe, 0x91fe, 0x91fe};
  const ReplicaVote v = VoteOnFingerprints(by_rank);
  EXPECT_FALSE(v.agreed);
  ASSERT_TRUE(v.majority.has_value());
  EXPECT_EQ(*v.majority, 0x91feu);
  EXPECT_EQ(v.differing, (std::vector<int>{2, 4}));
  EXPECT_EQ(DescribeDivergence(v, by_rank, 120),
            "the replicas diverged at step 120: rank 2 (00000000000000ab), rank 4 (00000000000000cd) hold other "
            "parameters or optimizer state than the 6 other rank(s) (00000000000091fe)");
}

TEST(ReplicaVoteTest, ATieHasNoMajorityAndNamesEveryRank) {
  const std::vector<uint64_t> by_rank = {1, 2};
  const ReplicaVote v = VoteOnFingerprints(by_rank);
  EXPECT_FALSE(v.agreed);
  EXPECT_FALSE(v.majority.has_value());
  EXPECT_EQ(v.differing, (std::vector<int>{0, 1}));
  EXPECT_NE(DescribeDivergence(v, by_rank, 3).find("no majority: which one is wrong cannot be told"), std::string::npos);
  EXPECT_FALSE(VoteOnFingerprints({1, 1, 2, 2}).majority.has_value()) << "half is not a majority";
}

TEST(ReplicaVoteTest, AJobOfManyRanksNamesEightAndCountsTheRest) {
  std::vector<uint64_t> by_rank(64, 5);
  for (int r = 0; r < 12; ++r) by_rank[r] = 9;
  const ReplicaVote v = VoteOnFingerprints(by_rank);
  EXPECT_EQ(v.differing.size(), 12u);
  EXPECT_NE(DescribeDivergence(v, by_rank, 1).find(", and 4 more hold"), std::string::npos) << DescribeDivergence(v, by_rank, 1);
}

}  // namespace
}  // namespace dtrun::worker
