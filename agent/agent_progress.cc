// What the agent makes of its workers' progress reports (from ProgressChannel): snapshots and the
// recovery under way, and the warm pool's refill. Same class as agent.cc.
#include <signal.h>

#include <utility>

#include "agent/agent.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {

// The reporting worker of the current group, or nullptr: a report names its local rank itself and
// may come from a worker the group no longer has.
const WorkerGroup::Worker* Agent::ReportingWorker(int local_rank) const {
  if (!group_ || local_rank < 0 || local_rank >= static_cast<int>(group_->workers().size())) return nullptr;
  return &std::as_const(*group_).workers()[local_rank];
}

void Agent::OnReport(int local_rank, const progress::Report& report) {
  snapshots_->OnReport(local_rank, report);
  if (report.kind == progress::Report::Kind::kDiverged) RecordDivergence(local_rank, report);
  if (report.kind == progress::Report::Kind::kKeeping) OnStateKeeping(local_rank);
  if (report.kind == progress::Report::Kind::kKept || report.kind == progress::Report::Kind::kNotKept) {
    OnKeepingEnded(local_rank, report);
  }
  if (report.kind == progress::Report::Kind::kBeat || report.kind == progress::Report::Kind::kSnapshot) FillWarmPool();
}

// A replica check found this rank's state unlike the others' (worker/replica_check.h). The worker
// says so on stderr and exits; the record keeps its fingerprint and the majority's for later.
void Agent::RecordDivergence(int local_rank, const progress::Report& report) {
  const WorkerGroup::Worker* w = ReportingWorker(local_rank);
  const int rank = w != nullptr ? w->global_rank : -1;
  spdlog::error("rank {} (local rank {}) holds other parameters than the other replicas at step {} (fingerprint {}, "
                "majority {}): silent data corruption, or a rank that computes differently",
                rank, local_rank, report.step.value_or(-1), report.fingerprint, report.majority);
  events_.Record("replica_mismatch", group_round_,
                 {{"rank", rank}, {"local_rank", local_rank}, {"step", report.step.value_or(-1)},
                  {"fingerprint", report.fingerprint}, {"majority", report.majority}});
}

// A worker is writing its state into memory on its way out: a stop after a failure waits for it
// (StopDeadline) rather than kill it mid-write after the short grace.
void Agent::OnStateKeeping(int local_rank) {
  if (ReportingWorker(local_rank) != nullptr) stop_.Keeping(local_rank);
}

// A worker stopped after a failure kept its state in memory on its way out (worker/
// memory_snapshot.h, Rescue), or could not. It is usually blocked in a collective with the rank
// that is gone (a lost node, a hung worker), and would sit there until the stop grace ran out: it
// has nothing left to save, so it goes now. An interrupt's stop is left alone: that worker
// checkpoints to disk.
void Agent::OnKeepingEnded(int local_rank, const progress::Report& report) {
  const WorkerGroup::Worker* w = ReportingWorker(local_rank);
  if (w == nullptr) return;
  stop_.Done(local_rank);
  if (report.kind == progress::Report::Kind::kKept) {
    events_.Record("state_kept", group_round_,
                   {{"rank", w->global_rank},
                    {"local_rank", local_rank},
                    {"step", report.step.value_or(-1)},
                    {"stopping", stopping_}});
  }
  if (stopping_ && interrupt_signal_ == 0) w->process.SignalGroup(SIGKILL);
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
