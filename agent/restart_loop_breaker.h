// The restart-loop breaker: a job whose attempts keep failing before they pass the best step any
// earlier attempt reached (a NaN that comes back, a corrupt shard at the same step) stops after
// --max-attempts-without-progress such attempts, instead of using up every restart. Plain logic
// over each attempt's progress board; only jobs whose workers report more than a hello (steps,
// sections, snapshots) are judged, by the furthest step a report or a snapshot shows.
#pragma once

#include <cstdint>

#include "agent/failure_report.h"
#include "progress/progress_board.h"

namespace dtrun {

class RestartLoopBreaker {
 public:
  explicit RestartLoopBreaker(int limit) : limit_(limit) {}  // limit 0: off

  // An attempt ended with `board` as its reports (null: it never ran).
  void OnAttemptEnded(const progress::ProgressBoard* board);
  // Rewrites the attempt's first failure as a no-progress failure (FailureKind::kNoProgress, its exit
  // code, a message naming the step and the flag) if this attempt would be the limit-th in a row
  // without progress. `board` is the failing attempt's reports.
  void MarkIfNoProgress(WorkerFailure& failure, const progress::ProgressBoard* board) const;

 private:
  int limit_;
  int64_t best_step_ever_ = -1;  // the best step of every earlier attempt
  bool job_reports_ = false;     // some attempt's workers reported steps
  int attempts_without_progress_ = 0;  // in a row, the latest last
};

}  // namespace dtrun
