#include "agent/restart_loop_breaker.h"

#include "absl/strings/str_cat.h"
#include "base/exit_codes.h"

namespace dtrun {

void RestartLoopBreaker::MarkIfNoProgress(WorkerFailure& f, const progress::ProgressBoard* board) const {
  // A hello alone (any `import dtrun`) says nothing of progress; a step, a section or a snapshot does.
  if (limit_ <= 0 || !board || !(job_reports_ || board->any_active())) return;
  if (board->furthest_step() > best_step_ever_ || attempts_without_progress_ + 1 < limit_) return;
  const std::string last = f.kind == rdzv::FailureKind::kHang ? absl::StrCat("hang: ", f.message) : rdzv::HowItEnded(f);
  f.message = absl::StrCat(limit_, " attempts in a row made no progress past ",
                           best_step_ever_ >= 0 ? absl::StrCat("step ", best_step_ever_) : "the start",
                           "; the job stops instead of restarting again (--max-attempts-without-progress ", limit_,
                           "). Last failure: ", last);
  f.kind = rdzv::FailureKind::kNoProgress;
  f.exit_code = kNoProgressExitCode;
  f.signal = 0;
}

void RestartLoopBreaker::OnAttemptEnded(const progress::ProgressBoard* board) {
  if (!board) return;
  if (board->any_active()) job_reports_ = true;
  if (!job_reports_) return;
  if (board->furthest_step() > best_step_ever_) {
    best_step_ever_ = board->furthest_step();
    attempts_without_progress_ = 0;
  } else {
    ++attempts_without_progress_;
  }
}

}  // namespace dtrun
