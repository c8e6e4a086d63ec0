// What the agent makes of its workers' progress reports (from ProgressChannel): snapshots and the
// recovery under way, the warm pool's refill, and the restart-loop breaker. Same class as agent.cc.
#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "base/exit_codes.h"
#include "base/signal_names.h"

namespace dtrun {

void Agent::OnReport(int local_rank, const progress::Report& report) {
  snapshots_->OnReport(local_rank, report);
  if (report.kind == progress::Report::Kind::kBeat) FillWarmPool();
}

void Agent::FillWarmPool() {
  // Started once the round trains, not while it starts: on a busy node the parked workers' own
  // start would otherwise delay the restart they are meant to speed up.
  // Without restarts a failure ends the job: nothing would ever release them.
  if (options_.max_restarts == 0 || warm_.off() || !group_ || stopping_ || !board()) return;
  if (warm_.size() >= group_->requests().size() * WarmDepth()) return;
  for (const progress::RankProgress& r : board()->ranks()) {
    if (!r.warm || r.step < 0) return;
  }
  warm_.Fill(group_->requests(), WarmDepth());
}

void Agent::MarkIfNoProgress(WorkerFailure& f) const {
  const int limit = options_.max_attempts_without_progress;
  if (limit <= 0 || !board() || !(job_reports_ || board()->any_reported())) return;
  if (board()->best_step() > best_step_ever_ || attempts_without_progress_ + 1 < limit) return;
  const std::string last = f.kind == rdzv::kHangFailure ? absl::StrCat("hang: ", f.message)
                           : f.signal                   ? absl::StrCat("signal ", SignalName(f.signal))
                                                        : absl::StrCat("exit code ", f.exit_code);
  f.message = absl::StrCat(limit, " attempts in a row made no progress past ",
                           best_step_ever_ >= 0 ? absl::StrCat("step ", best_step_ever_) : "the start",
                           "; the job stops instead of restarting again (--max-attempts-without-progress ", limit,
                           "). Last failure: ", last);
  f.kind = rdzv::kNoProgressFailure;
  f.exit_code = kNoProgressExitCode;
  f.signal = 0;
}

void Agent::RememberAttemptProgress() {
  if (!board()) return;
  if (board()->any_reported()) job_reports_ = true;
  if (!job_reports_) return;
  if (board()->best_step() > best_step_ever_) {
    best_step_ever_ = board()->best_step();
    attempts_without_progress_ = 0;
  } else {
    ++attempts_without_progress_;
  }
}

}  // namespace dtrun
