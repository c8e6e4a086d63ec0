// What the agent makes of progress reports: hang rules, stacks before the stop, and the
// restart-loop breaker. Same class and loop as agent.cc; the reports come from ProgressChannel.
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/agent.h"
#include "agent/stack_dumper.h"
#include "base/exit_codes.h"
#include "base/host_name.h"
#include "base/process_table.h"
#include "base/signal_names.h"
#include "base/unix_time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

std::string Seconds(Millis ms) { return absl::StrFormat("%.1f s", ms.count() / 1000.0); }

std::string Describe(const progress::Hang& h) {
  std::string where = h.section.empty() ? "" : absl::StrCat(" in section '", h.section, "'");
  std::string step = h.step >= 0 ? absl::StrCat(", after step ", h.step) : ", before its first step";
  if (h.rule == "section") {
    return absl::StrCat("stuck", where, " for ", Seconds(h.stuck_for), " (--section-timeout ", h.section, "=",
                        h.limit.count() / 1000.0, ")", step);
  }
  return absl::StrCat("no progress report for ", Seconds(h.stuck_for), where, " (--heartbeat-timeout ",
                      h.limit.count() / 1000.0, ")", step);
}

}  // namespace

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

void Agent::CheckProgress() {
  if (!group_) return;
  if (stopping_ || reported_ || hang_declared_) return;
  const Clock::time_point now = options_.now();
  if (board() && options_.hang.enabled()) {
    if (std::optional<progress::Hang> h = board()->FindHang(options_.hang, now)) return DeclareHang(*h, Describe(*h));
  }
  CheckDState(now);
}

void Agent::CheckDState(Clock::time_point now) {
  if (options_.dstate_timeout.count() <= 0 || now < next_dstate_check_) return;
  // Sampled: the kernel tells nobody when a thread enters D state.
  next_dstate_check_ = now + std::clamp(options_.dstate_timeout / 10, Millis(100), Millis(5000));
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (!w.process.running()) continue;
    std::map<pid_t, uint64_t> sleeping = ThreadsInUninterruptibleSleep(w.process.pid());
    auto known = dstate_since_.find(w.process.pid());
    // Still stuck: in D at both looks, and not switched in between.
    std::map<pid_t, uint64_t> still;
    if (known != dstate_since_.end()) {
      for (const auto& [tid, switches] : sleeping) {
        auto before = known->second.threads.find(tid);
        if (before != known->second.threads.end() && before->second == switches) still.emplace(tid, switches);
      }
    }
    if (still.empty()) {
      if (sleeping.empty()) {
        dstate_since_.erase(w.process.pid());
      } else {
        dstate_since_[w.process.pid()] = StuckThreads{now, std::move(sleeping)};
      }
      continue;
    }
    known->second.threads = std::move(still);
    const Clock::time_point since = known->second.since;
    if (now - since < options_.dstate_timeout) continue;
    progress::Hang h;
    h.local_rank = w.local_rank;
    h.rule = "dstate";
    h.stuck_for = std::chrono::duration_cast<Millis>(now - since);
    h.limit = options_.dstate_timeout;
    if (board()) h.step = board()->ranks()[w.local_rank].step;
    std::string wchan = ReadProcFile(w.process.pid(), "wchan");
    return DeclareHang(h, absl::StrCat("in uninterruptible sleep (D state) for at least ", Seconds(h.stuck_for),
                                       wchan.empty() || wchan == "0" ? "" : absl::StrCat(" in ", wchan),
                                       " (--dstate-timeout ", h.limit.count() / 1000.0, ")"));
  }
}

void Agent::DeclareHang(const progress::Hang& hang, const std::string& what) {
  hang_declared_ = true;
  reported_ = true;  // nothing else is reported for this round
  ++counters_.hangs;
  const WorkerGroup::Worker& w = std::as_const(*group_).workers()[hang.local_rank];
  spdlog::error("hang detected at worker rank {} (local rank {}, pid {}): {}; collecting every worker's stacks",
                w.global_rank, w.local_rank, w.process.pid(), what);
  PendingHang pending;
  pending.hang = hang;
  pending.what = what;
  pending_hang_ = std::move(pending);
  StartStackDump();
}

WorkerFailure Agent::HangFailureOf(int local_rank) const {
  const WorkerGroup::Worker& w = std::as_const(*group_).workers()[local_rank];
  WorkerFailure f;
  f.host = LocalHostName();
  f.global_rank = w.global_rank;
  f.local_rank = w.local_rank;
  f.pid = w.process.pid();
  f.exit_code = kHangExitCode;
  f.kind = rdzv::kHangFailure;
  return f;
}

bool Agent::ReportHang() {
  PendingHang& p = *pending_hang_;
  const std::string attempt_dir = absl::StrCat(paths_.error_root, "/attempt_", group_round_);
  if (!p.failure) {
    // Every rank of a collective hang stops reporting at once; the stacks tell the one that is
    // elsewhere from the ones that wait for it inside torch.distributed.
    std::vector<int> elsewhere, waiting;
    for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
      std::optional<bool> in_collective = WaitsInCollective(w.dir + "/stacks.txt");
      if (in_collective) (*in_collective ? waiting : elsewhere).push_back(w.local_rank);
    }
    WorkerFailure f = HangFailureOf(p.hang.local_rank);
    std::string culprit;
    if (!elsewhere.empty() && !waiting.empty()) {
      f = HangFailureOf(elsewhere[0]);
      culprit = absl::StrCat("; the stacks show rank ", f.global_rank, " outside torch.distributed while ",
                             waiting.size(), " local rank(s) wait in a collective");
      spdlog::error("rank {} is the likely culprit{}", f.global_rank, culprit);
    }
    f.message = absl::StrCat(p.what, culprit, "; stacks: ", attempt_dir, "/<local rank>/stacks.txt on each node");
    p.failure = f;
    if (elsewhere.empty() && !waiting.empty() && group_nodes_ > 1) {
      // Every rank here waits for someone: a node whose rank is elsewhere tells more. Give it a
      // moment to report first (the round then ends, and this report is not needed).
      const Millis grace = std::clamp(p.hang.limit / 4, Millis(1000), Millis(15000));
      p.report_after = options_.now() + grace;
      spdlog::warn("every local rank waits in a collective; holding the hang report for {} for a node with the "
                   "culprit", Seconds(grace));
    }
  }
  const bool still_ours = view_ && view_->phase == rdzv::JobPhase::kRunning && view_->round == group_round_;
  if (p.report_after && still_ours && options_.now() < *p.report_after) return false;
  const PendingHang held = std::move(*pending_hang_);
  pending_hang_.reset();
  WorkerFailure f = *held.failure;
  if (!still_ours && f.kind == rdzv::kHangFailure && view_ && view_->stacks_round == group_round_) {
    spdlog::info("another node reported the hang first");
    return true;
  }
  f.time_unix_ms = UnixMillisNow();
  events_.Record("hang", group_round_,
                 {{"rank", f.global_rank}, {"local_rank", f.local_rank}, {"worker_pid", f.pid},
                  {"detected_at_rank", group_->workers()[held.hang.local_rank].global_rank}, {"rule", held.hang.rule},
                  {"section", held.hang.section}, {"step", held.hang.step},
                  {"stuck_ms", held.hang.stuck_for.count()}, {"limit_ms", held.hang.limit.count()},
                  {"stacks_dir", attempt_dir}, {"message", f.message}});
  MarkIfNoProgress(f);
  rounds_->ReportFailure(group_round_, {f});
  return true;
}

void Agent::StartStackDump() {
  stacks_taken_round_ = group_round_;
  std::vector<StackDumper::Target> targets;
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (!w.process.running()) continue;
    StackDumper::Target t;
    t.local_rank = w.local_rank;
    t.pid = w.process.pid();
    if (board()) t.stack_signal = board()->ranks()[w.local_rank].stack_signal;
    t.file = w.dir + "/stacks.txt";
    targets.push_back(t);
  }
  const bool needs_tool = std::any_of(targets.begin(), targets.end(), [](const auto& t) { return t.stack_signal == 0; });
  std::string tool = needs_tool ? StackDumper::FindTool() : "";
  if (needs_tool && tool.empty()) {
    spdlog::warn("no stack tool for workers that did not register a stack signal: install elfutils (eu-stack) or gdb");
  }
  dumper_.Start(std::move(targets), tool, options_.now());
}

bool Agent::StackDumpPending() {
  if (!dumper_.active()) return false;
  if (!dumper_.Finished(options_.now())) return true;
  std::vector<std::string> files = dumper_.Finish();
  events_.Record("stacks", group_round_, {{"files", files}});
  if (!files.empty()) {
    spdlog::warn("stacks of {} worker(s) written: {}{}", files.size(), files[0], files.size() > 1 ? ", ..." : "");
  }
  return false;
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

std::optional<Clock::time_point> Agent::ProgressDeadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](std::optional<Clock::time_point> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  const Clock::time_point now = options_.now();
  if (dumper_.active()) consider(dumper_.next_check(now));
  if (pending_hang_ && pending_hang_->report_after) consider(*pending_hang_->report_after);
  if (!group_) return next;
  if (stopping_ || reported_ || hang_declared_) return next;
  if (board() && options_.hang.enabled()) consider(board()->NextDeadline(options_.hang));
  if (options_.dstate_timeout.count() > 0) consider(std::max(next_dstate_check_, now));
  return next;
}

}  // namespace dtrun
