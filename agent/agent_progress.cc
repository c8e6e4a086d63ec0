// What the agent makes of its workers' progress reports (from ProgressChannel): snapshots and the
// recovery under way, and the warm pool's refill. Same class as agent.cc.
#include "agent/agent.h"

namespace dtrun {

void Agent::OnReport(int local_rank, const progress::Report& report) {
  snapshots_->OnReport(local_rank, report);
  if (report.kind == progress::Report::Kind::kBeat || report.kind == progress::Report::Kind::kSnapshot) FillWarmPool();
}

void Agent::FillWarmPool() {
  // Started once the round trains (every rank reported a step or wrote a snapshot), not while it
  // starts: on a busy node the parked workers' own start would otherwise delay the restart they
  // are meant to speed up. Without restarts a failure ends the job: nothing would release them.
  if (options_.max_restarts == 0 || warm_.off() || !group_ || stopping_ || !board()) return;
  if (warm_.size() >= group_->requests().size() * WarmDepth()) return;
  for (const progress::RankProgress& r : board()->ranks()) {
    if (!r.warm || (r.step < 0 && r.snapshot_step < 0)) return;
  }
  warm_.Fill(group_->requests(), WarmDepth());
}

}  // namespace dtrun
