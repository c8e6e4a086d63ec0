// The job-wide resume from in-memory snapshots (worker/job_resume.h) as the C++ trainers run it:
// three ranks in three threads with Gloo (tests/worker/gloo_ranks.h), each with its own snapshot
// region holding what its node kept, choosing one step together, sending the copy to the ranks
// without it, and comparing what they restored.
#include "worker/job_resume.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/unix_time.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/worker/gloo_ranks.h"
#include "tests/worker/snapshot_jobs.h"

namespace dtrun::worker {
namespace {

#if DTRUN_WITH_GLOO

using testing::ExpectEqualValues;
using testing::Job;
using testing::RankOf;
using testing::Snapshots;

constexpr int kWorld = 3;

// A snapshot header holds its completion time in ms (UnixMillisNow): two snapshots written a tick
// apart are ordered by it.
void AwaitTheNextMillisecond() {
  const int64_t now = UnixMillisNow();
  while (UnixMillisNow() == now) std::this_thread::yield();
}

// One rank's side of the job before the crash: the snapshots its region holds, written in the
// order the steps of `writes` are listed, each by a job trained to that step; `perturbed` writes
// a replica that differs from the others at that step.
struct Held {
  std::vector<int64_t> writes;
  int64_t perturbed = -1;
};

// What every rank resumed from, and the state it restored.
struct Outcome {
  std::vector<std::string> errors;
  std::vector<std::optional<Resumed>> resumed{kWorld};
  std::vector<std::vector<torch::Tensor>> values{kWorld};
  std::vector<std::vector<torch::Tensor>> written;  // by step: the state written at it (unperturbed)
};

Outcome ResumeAfter(const std::vector<Held>& held) {
  Outcome out;
  std::vector<std::unique_ptr<Snapshots>> regions;
  for (int r = 0; r < kWorld; ++r) regions.push_back(std::make_unique<Snapshots>(nullptr, RankOf(r, kWorld)));
  for (int r = 0; r < kWorld; ++r) {
    for (int64_t step : held[r].writes) {
      Job job;  // at step 1, as every rank's
      while (job.progress.global_step < step) job.Step();
      if (out.written.size() <= static_cast<size_t>(step)) out.written.resize(step + 1);
      out.written[step] = job.Values();
      if (step == held[r].perturbed) {
        torch::NoGradGuard no_grad;
        job.model->parameters()[0].add_(1e-3);
      }
      AwaitTheNextMillisecond();
      EXPECT_TRUE((*regions[r])->Write(job.State()).ok()) << "rank " << r << ", step " << step;
    }
  }
  // Made here: a job draws from the global generator, which the ranks' threads would share.
  std::vector<std::unique_ptr<Job>> fresh;
  for (int r = 0; r < kWorld; ++r) fresh.push_back(std::make_unique<Job>());
  const std::string dir = dtrun::testing::MakeTempDir();  // no checkpoint in it: no disk fallback
  out.errors = testing::OnEveryRank(kWorld, [&](int r, ProcessGroupHandle& pg) {
    ResumeRequest request;
    request.dir = dir;
    request.snapshots = &**regions[r];
    absl::StatusOr<Resumed> resumed = ResumeJobWide(request, &pg, r, torch::kCPU, fresh[r]->State());
    if (!resumed.ok()) throw std::runtime_error(std::string(resumed.status().message()));
    out.resumed[r] = *resumed;
    // The resume leaves the trainer's progress alone and returns it, as trainers then take it.
    if (resumed->progress) fresh[r]->progress = *resumed->progress;
  });
  for (int r = 0; r < kWorld; ++r) out.values[r] = fresh[r]->Values();
  return out;
}

// Every rank resumed at `step`, from `sources[rank]`, with the state written at it.
void ExpectEveryRankAt(const Outcome& out, int64_t step, const std::vector<std::string>& sources) {
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(out.errors[r], "") << "rank " << r;
    ASSERT_TRUE(out.resumed[r].has_value() && out.resumed[r]->progress.has_value()) << "rank " << r;
    EXPECT_EQ(out.resumed[r]->progress->global_step, step) << "rank " << r;
    EXPECT_EQ(out.resumed[r]->source, sources[r]) << "rank " << r;
    ExpectEqualValues(out.values[r], out.written[step]);
  }
}

// A job killed on every node at once, each node's --snapshot-dir copy taken at another moment:
// no step is held by two ranks, and the snapshot completed last wins though another rank holds
// a higher step (a line the job had gone back past: its snapshots were completed before).
TEST(JobResumeTest, WithEveryRankAtAnotherStepTheSnapshotCompletedLastIsRestoredEverywhere) {
  const Outcome out = ResumeAfter({{{5}}, {{3}}, {{4}}});
  ExpectEveryRankAt(out, 4, {"peer", "peer", "memory"});
}

// Two ranks of three hold step 3: enough to decide for the third, whose newer step 5 is its own.
TEST(JobResumeTest, AStepHalfTheHoldersHoldWinsOverANewerOneAndReachesTheRankWithoutIt) {
  const Outcome out = ResumeAfter({{{3}}, {{3}}, {{5}}});
  ExpectEveryRankAt(out, 3, {"memory", "memory", "peer"});
}

// Every rank holds steps 2 and 3, but rank 1's step 3 differs (the crash came before the
// replicas compared it): the ranks restore step 3, find their states differ, and take step 2.
TEST(JobResumeTest, RestoredCopiesThatDifferAreGivenUpForTheNextOlderStep) {
  Held differs{{2, 3}};
  differs.perturbed = 3;
  const Outcome out = ResumeAfter({{{2, 3}}, differs, {{2, 3}}});
  ExpectEveryRankAt(out, 2, {"memory", "memory", "memory"});
}

#endif  // DTRUN_WITH_GLOO

}  // namespace
}  // namespace dtrun::worker
