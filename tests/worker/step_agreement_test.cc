// The ranks' vote after each step read a step later (worker/step_agreement.h, Propose and
// TakeVerdict), as the trainer does where the step runs on GPUs in several processes: two ranks
// in two threads (tests/worker/gloo_ranks.h).
#include "worker/step_agreement.h"

#include <stdlib.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/env_names.h"
#include "gtest/gtest.h"
#include "tests/worker/gloo_ranks.h"
#include "worker/checkpoint.h"
#include "worker/foreach_sgd.h"
#include "worker/replica_check.h"

namespace dtrun::worker {
namespace {

#if DTRUN_WITH_GLOO

constexpr int kRanks = 2;

// One rank's side: a tiny model and optimizer (the state a snapshot fingerprints), and its
// StepAgreement, with no snapshot region and no agent.
struct Rank {
  Rank(int rank, ProcessGroupHandle& pg) : rank(rank) {
    model = torch::nn::Linear(3, 2);
    torch::NoGradGuard no_grad;  // every rank alike, as the trainers make them (the seed is global)
    model->weight.copy_(torch::arange(6, torch::kFloat32).reshape({2, 3}) / 10);
    model->bias.copy_(torch::tensor({0.5f, -0.5f}));
    optimizer = std::make_unique<ForeachSgd>(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    agreement = std::make_unique<StepAgreement>(&pg, torch::kCPU, rank, kRanks, reports, nullptr, nullptr);
  }
  TrainState State() { return TrainState{model.ptr().get(), optimizer.get(), nullptr, &progress}; }

  int rank;
  progress::ProgressClient reports{""};
  torch::nn::Linear model{nullptr};
  std::unique_ptr<ForeachSgd> optimizer;
  Progress progress;
  std::unique_ptr<StepAgreement> agreement;
};

std::vector<std::string> OnEveryRank(const std::function<void(Rank&)>& body) {
  return testing::OnEveryRank(kRanks, [&](int r, ProcessGroupHandle& pg) {
    Rank rank(r, pg);
    body(rank);
  });
}

TEST(StepAgreementTest, ALaggedVerdictReachesEveryRankAtTheSameStepOneLater) {
  std::vector<std::vector<bool>> stops(kRanks), snapshots(kRanks);
  // Not std::vector<bool>: its bits share words, and the ranks' threads write them at once.
  std::vector<char> first_was_empty(kRanks);
  const std::vector<std::string> errors = OnEveryRank([&](Rank& r) {
    first_was_empty[r.rank] = !r.agreement->TakeVerdict().has_value();
    for (int64_t step = 1; step <= 5; ++step) {
      StepWishes mine;
      mine.stop = r.rank == 1 && step == 3;      // one rank's signal
      mine.snapshot = r.rank == 0 && step == 2;  // another's cadence
      r.agreement->Propose(mine, step);
      // The trainer queues the next step here; then reads the vote of this one.
      const std::optional<StepVerdict> v = r.agreement->TakeVerdict();
      ASSERT_TRUE(v.has_value());
      stops[r.rank].push_back(v->stop);
      snapshots[r.rank].push_back(v->snapshot);
    }
    EXPECT_FALSE(r.agreement->TakeVerdict().has_value()) << "taken once";
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_TRUE(first_was_empty[r]) << "nothing proposed yet";
    EXPECT_EQ(stops[r], (std::vector<bool>{false, false, true, false, false})) << "rank " << r;
    // The strongest wish implies the weaker: the stop saves, and a save is a snapshot.
    EXPECT_EQ(snapshots[r], (std::vector<bool>{false, true, true, false, false})) << "rank " << r;
  }
}

TEST(StepAgreementTest, AProposalStillInFlightIsTakenBeforeTheNext) {
  std::vector<int> verdicts(kRanks);
  const std::vector<std::string> errors = OnEveryRank([&](Rank& r) {
    r.agreement->Propose(StepWishes{}, 1);
    r.agreement->Propose(StepWishes{}, 2);  // the vote of step 1 settles first
    verdicts[r.rank] = r.agreement->TakeVerdict().has_value() ? 1 : 0;
    verdicts[r.rank] += r.agreement->TakeVerdict().has_value() ? 1 : 0;
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(verdicts[r], 1) << "rank " << r << ": one vote left in flight, taken once";
  }
}

TEST(StepAgreementTest, ASnapshotKeptBeforeALaggedVoteIsComparedInIt) {
  std::vector<std::string> summaries(kRanks);
  const std::vector<std::string> errors = OnEveryRank([&](Rank& r) {
    r.progress.global_step = 4;
    r.agreement->Snapshot(r.State(), 0, 4);
    r.agreement->Propose(StepWishes{}, 4);
    r.agreement->TakeVerdict();
    summaries[r.rank] = r.agreement->Summary();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(summaries[r], "replica checks: 1 in the steps' all-reduce") << "rank " << r;
  }
}

TEST(StepAgreementTest, ReplicasThatDifferAreFoundWhenTheLaggedVoteIsRead) {
  const std::vector<std::string> errors = OnEveryRank([&](Rank& r) {
    if (r.rank == 1) {
      torch::NoGradGuard no_grad;
      r.model->weight.add_(1e-3);  // a corrupted replica
    }
    r.progress.global_step = 1;
    r.agreement->Snapshot(r.State(), 0, 1);
    r.agreement->Propose(StepWishes{}, 1);  // queued; nothing is thrown yet
    r.agreement->TakeVerdict();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(errors[r].find("the replicas diverged at step 1"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

TEST(StepAgreementTest, ALossNotFiniteOnOneRankOnlyEndsTheAttemptWhenTheLaggedVoteIsRead) {
  const std::vector<std::string> errors = OnEveryRank([&](Rank& r) {
    StepWishes mine;
    mine.loss_finite = r.rank == 0;
    r.agreement->Propose(mine, 9);
    r.agreement->TakeVerdict();
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(errors[r].find("the loss of step 9 is not finite on rank(s) 1 only"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
}

#else
TEST(StepAgreementTest, TheLaggedVoteTestsNeedGloo) {
  GTEST_SKIP() << "this LibTorch has no Gloo headers (pip's wheels): the two ranks run on CPU Gloo groups";
}
#endif

TEST(StepAgreementTest, DTRUN_STEP_VOTESaysWhetherTheVoteIsReadLater) {
  unsetenv(env::kStepVote);
  EXPECT_TRUE(StepVotesLagged(true));
  EXPECT_FALSE(StepVotesLagged(false));
  setenv(env::kStepVote, "lagged", 1);
  EXPECT_TRUE(StepVotesLagged(false));
  setenv(env::kStepVote, "at-once", 1);
  EXPECT_FALSE(StepVotesLagged(true));
  setenv(env::kStepVote, "sometimes", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(StepVotesLagged(true)) << "the default stands";
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("DTRUN_STEP_VOTE=sometimes"), std::string::npos);
  unsetenv(env::kStepVote);
}

}  // namespace
}  // namespace dtrun::worker
