#include "worker/step_votes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrun::worker {
namespace {

struct Rank {
  StepWishes wishes;
  std::optional<PendingCheck> pending;
};

// What every rank reads after the all-reduce (MAX) of the ranks' votes.
StepVerdict Agree(const std::vector<Rank>& ranks) {
  StepVotes maxed = EncodeStepVotes(ranks[0].wishes, ranks[0].pending);
  for (const Rank& r : ranks) {
    const StepVotes v = EncodeStepVotes(r.wishes, r.pending);
    for (size_t i = 0; i < maxed.size(); ++i) maxed[i] = std::max(maxed[i], v[i]);
  }
  return DecodeStepVotes(maxed);
}

TEST(StepVotesTest, NothingAskedAndNothingPendingDecidesNothing) {
  const StepVerdict v = Agree({Rank{}, Rank{}, Rank{}});
  EXPECT_FALSE(v.stop || v.save || v.snapshot || v.loss_not_finite_somewhere || v.loss_not_finite_everywhere);
  EXPECT_TRUE(v.pending_agreed);
}

TEST(StepVotesTest, OneRanksWishIsEveryRanksDecision) {
  Rank stop, save, snap;
  stop.wishes.stop = true;
  save.wishes.save = true;
  snap.wishes.snapshot = true;
  EXPECT_TRUE(Agree({Rank{}, stop}).stop);
  EXPECT_TRUE(Agree({save, Rank{}}).save);
  const StepVerdict v = Agree({Rank{}, Rank{}, snap});
  EXPECT_TRUE(v.snapshot);
  EXPECT_FALSE(v.stop || v.save);
}

// A stop saves a checkpoint, and a checkpoint is also a snapshot.
TEST(StepVotesTest, TheStrongestWishWinsAndImpliesTheWeakerOnes) {
  Rank stop, save, snap;
  stop.wishes.stop = true;
  save.wishes.save = true;
  snap.wishes.snapshot = true;
  const StepVerdict all = Agree({snap, stop, save});
  EXPECT_TRUE(all.stop && all.save && all.snapshot);
  const StepVerdict saved = Agree({snap, save, snap});
  EXPECT_FALSE(saved.stop);
  EXPECT_TRUE(saved.save && saved.snapshot);
}

TEST(StepVotesTest, ALossNotFiniteOnSomeRanksIsToldApartFromEveryRank) {
  Rank nan;
  nan.wishes.loss_finite = false;
  const StepVerdict some = Agree({Rank{}, nan, Rank{}});
  EXPECT_TRUE(some.loss_not_finite_somewhere);
  EXPECT_FALSE(some.loss_not_finite_everywhere);
  const StepVerdict all = Agree({nan, nan});
  EXPECT_TRUE(all.loss_not_finite_somewhere);
  EXPECT_TRUE(all.loss_not_finite_everywhere);
}

TEST(StepVotesTest, TheSameFingerprintOnEveryRankAgreesWhateverTheWishes) {
  Rank r, stop;
  r.pending = PendingCheck{120, 0xFEDCBA9876543210ull};
  stop.pending = r.pending;
  stop.wishes.stop = true;
  EXPECT_TRUE(Agree({r, r, r}).pending_agreed);
  const StepVerdict v = Agree({r, stop, r});
  EXPECT_TRUE(v.pending_agreed);
  EXPECT_TRUE(v.stop);
  for (uint64_t extreme : {uint64_t{0}, ~uint64_t{0}}) {  // the packing stays exact at both ends
    Rank bad;
    bad.pending = PendingCheck{int64_t{1} << 40, extreme};
    bad.wishes.loss_finite = false;
    bad.wishes.stop = true;
    const StepVerdict all_bad = Agree({bad, bad});
    EXPECT_TRUE(all_bad.pending_agreed && all_bad.loss_not_finite_everywhere && all_bad.stop) << extreme;
  }
}

TEST(StepVotesTest, NumbersNoRankCouldHaveSentAgreeOnNothing) {
  for (double nan_or_huge : {std::nan(""), 1e300, -1.0}) {
    EXPECT_FALSE(DecodeStepVotes({nan_or_huge, 0.0}).pending_agreed) << nan_or_huge;
    EXPECT_FALSE(DecodeStepVotes({0.0, -nan_or_huge}).pending_agreed) << nan_or_huge;
  }
}

TEST(StepVotesTest, AFingerprintThatDiffersInEitherHalfDisagrees) {
  Rank r, high, low;
  r.pending = PendingCheck{120, 0xFEDCBA9876543210ull};
  high.pending = PendingCheck{120, 0xFEDCBA9976543210ull};
  low.pending = PendingCheck{120, 0xFEDCBA9876543211ull};
  EXPECT_FALSE(Agree({r, r, high}).pending_agreed);
  EXPECT_FALSE(Agree({low, r}).pending_agreed);
}

// Both are bugs in a trainer rather than corruption, but no rank may take them for agreement.
TEST(StepVotesTest, ADifferentStepOrACheckMissingOnOneRankDisagrees) {
  Rank r, other_step;
  r.pending = PendingCheck{120, 7};
  other_step.pending = PendingCheck{121, 7};
  EXPECT_FALSE(Agree({r, other_step}).pending_agreed);
  EXPECT_FALSE(Agree({r, Rank{}}).pending_agreed);
  Rank zero;  // a fingerprint of 0 at step 0 is still not the same as nothing pending
  zero.pending = PendingCheck{0, 0};
  EXPECT_FALSE(Agree({zero, Rank{}}).pending_agreed);
}

}  // namespace
}  // namespace dtrun::worker
