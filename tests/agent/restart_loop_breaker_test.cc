// The restart-loop breaker (agent/restart_loop_breaker.h) over hand-fed progress boards.
#include "agent/restart_loop_breaker.h"

#include "base/exit_codes.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

// One attempt of a one-rank job that reached `step` (-1: it reported nothing).
std::unique_ptr<progress::ProgressBoard> Attempt(int64_t step) {
  auto board = std::make_unique<progress::ProgressBoard>(1);
  if (step >= 0) {
    progress::Report beat;
    beat.step = step;
    board->Apply(0, beat, Clock::now());
  }
  return board;
}

WorkerFailure Crash() {
  WorkerFailure f;
  f.exit_code = 1;
  return f;
}

TEST(RestartLoopBreakerTest, TheLimitthAttemptInARowThatDoesNotPassTheBestStepEndsTheJob) {
  RestartLoopBreaker breaker(3);
  breaker.OnAttemptEnded(Attempt(10).get());
  for (int64_t step : {8, 9}) {  // attempts 2 and 3: no progress, below the limit
    auto board = Attempt(step);
    WorkerFailure f = Crash();
    breaker.MarkIfNoProgress(f, board.get());
    EXPECT_NE(f.kind, rdzv::FailureKind::kNoProgress);
    breaker.OnAttemptEnded(board.get());
  }
  auto fourth = Attempt(10);  // equal is not past
  WorkerFailure f = Crash();
  breaker.MarkIfNoProgress(f, fourth.get());
  EXPECT_EQ(f.kind, rdzv::FailureKind::kNoProgress);
  EXPECT_EQ(f.exit_code, kNoProgressExitCode);
  EXPECT_NE(f.message.find("3 attempts in a row made no progress past step 10"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("Last failure: exit code 1"), std::string::npos) << f.message;
}

TEST(RestartLoopBreakerTest, TheLastFailureIsNamedByTheFirstLineOfItsError) {
  RestartLoopBreaker breaker(1);
  breaker.OnAttemptEnded(Attempt(10).get());
  auto again = Attempt(10);
  WorkerFailure f = Crash();
  f.message = "ValueError: bad batch 7\nmore";
  breaker.MarkIfNoProgress(f, again.get());
  EXPECT_EQ(f.kind, rdzv::FailureKind::kNoProgress);
  EXPECT_NE(f.message.find("Last failure: exit code 1: ValueError: bad batch 7"), std::string::npos) << f.message;
  EXPECT_EQ(f.message.find("more"), std::string::npos) << f.message;
}

TEST(RestartLoopBreakerTest, AnAttemptPastTheBestStepStartsTheCountAgain) {
  RestartLoopBreaker breaker(2);
  breaker.OnAttemptEnded(Attempt(10).get());
  breaker.OnAttemptEnded(Attempt(5).get());   // one without progress
  breaker.OnAttemptEnded(Attempt(11).get());  // progress: the count starts again
  auto first = Attempt(11);
  WorkerFailure f = Crash();
  breaker.MarkIfNoProgress(f, first.get());
  EXPECT_NE(f.kind, rdzv::FailureKind::kNoProgress);  // the 1st without progress since step 11
  breaker.OnAttemptEnded(first.get());
  auto second = Attempt(11);
  breaker.MarkIfNoProgress(f, second.get());
  EXPECT_EQ(f.kind, rdzv::FailureKind::kNoProgress);  // the 2nd in a row
}

TEST(RestartLoopBreakerTest, JobsWhoseWorkersNeverReportAndALimitOfZeroAreNeverJudged) {
  RestartLoopBreaker silent(1);
  silent.OnAttemptEnded(Attempt(-1).get());
  auto board = Attempt(-1);
  WorkerFailure f = Crash();
  silent.MarkIfNoProgress(f, board.get());
  EXPECT_NE(f.kind, rdzv::FailureKind::kNoProgress);
  RestartLoopBreaker off(0);
  off.OnAttemptEnded(Attempt(10).get());
  auto again = Attempt(3);
  off.MarkIfNoProgress(f, again.get());
  EXPECT_NE(f.kind, rdzv::FailureKind::kNoProgress);
}

// A script that reports no step but writes snapshots (dtrun.snapshot without dtrun.heartbeat) is
// judged by its snapshots' steps, and one that only said hello (`import dtrun`) is not judged.
std::unique_ptr<progress::ProgressBoard> Reported(progress::Report::Kind kind, int64_t step) {
  auto board = std::make_unique<progress::ProgressBoard>(1);
  progress::Report r;
  r.kind = kind;
  if (step >= 0) r.step = step;
  board->Apply(0, r, Clock::now());
  return board;
}

TEST(RestartLoopBreakerTest, SnapshotsAndKeptStatesAreProgressAndAHelloIsNot) {
  RestartLoopBreaker breaker(2);
  breaker.OnAttemptEnded(Reported(progress::Report::Kind::kSnapshot, 10).get());
  breaker.OnAttemptEnded(Reported(progress::Report::Kind::kKept, 23).get());  // past 10
  auto past = Reported(progress::Report::Kind::kSnapshot, 40);
  WorkerFailure f = Crash();
  breaker.MarkIfNoProgress(f, past.get());
  EXPECT_NE(f.kind, rdzv::FailureKind::kNoProgress) << f.message;
  breaker.OnAttemptEnded(past.get());
  breaker.OnAttemptEnded(Reported(progress::Report::Kind::kSnapshot, 40).get());  // one without progress
  auto stuck = Reported(progress::Report::Kind::kSnapshot, 39);
  breaker.MarkIfNoProgress(f, stuck.get());
  EXPECT_EQ(f.kind, rdzv::FailureKind::kNoProgress);
  EXPECT_NE(f.message.find("no progress past step 40"), std::string::npos) << f.message;

  RestartLoopBreaker hello_only(1);
  for (int i = 0; i < 3; ++i) hello_only.OnAttemptEnded(Reported(progress::Report::Kind::kHello, -1).get());
  auto again = Reported(progress::Report::Kind::kHello, -1);
  WorkerFailure g = Crash();
  hello_only.MarkIfNoProgress(g, again.get());
  EXPECT_NE(g.kind, rdzv::FailureKind::kNoProgress) << g.message;
}

}  // namespace
}  // namespace dtrun
