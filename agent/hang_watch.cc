#include "agent/hang_watch.h"

#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/exit_codes.h"
#include "base/host_name.h"
#include "base/launch_layout.h"
#include "base/process_table.h"
#include "base/unix_time.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

using Millis = std::chrono::milliseconds;

}  // namespace

HangWatch::HangWatch(const AgentOptions& options, const AttemptPaths& paths, EventLog& events,
                     status::AgentCounters& counters, const ProgressChannel& progress,
                     const std::optional<rdzv::NodeView>& view, RoundOpenFn round_open, ReportFn report)
    : options_(options),
      paths_(paths),
      events_(events),
      counters_(counters),
      progress_(progress),
      view_(view),
      round_open_(std::move(round_open)),
      report_(std::move(report)),
      dstate_(options.dstate_timeout) {}

void HangWatch::OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) {
  group_ = &group;
  round_ = round.round;
  nodes_ = round.group_world_size;
  declared_ = false;
  group_done_.reset();
}

void HangWatch::OnGroupExited(WorkerGroup& /*group*/) {
  if (dumper_.active()) dumper_.Finish();  // the workers are gone: nothing more to read
  if (pending_) {
    pending_->report_after.reset();  // the workers are gone: now or never
    Report();
  }
  dstate_.Clear();
  group_ = nullptr;  // declared() stays: the round's outcome was the hang
}

void HangWatch::OnWake(Clock::time_point now) {
  if (!group_ || declared_ || !round_open_()) return;
  if (!group_done_) {
    for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
      std::optional<int> status = w.process.wait_status();
      if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) group_done_ = now;
    }
  }
  const progress::ProgressBoard* board = progress_.board();
  if (board && options_.hang.enabled()) {
    if (std::optional<progress::Hang> h = board->FindHang(options_.hang, now, group_done_)) {
      return Declare(*h, DescribeHang(*h));
    }
  }
  CheckDState(now);
}

std::optional<AgentComponent::Clock::time_point> HangWatch::NextDeadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](std::optional<Clock::time_point> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  const Clock::time_point now = options_.now();
  if (dumper_.active()) consider(dumper_.next_check(now));
  if (pending_ && pending_->report_after) consider(*pending_->report_after);
  if (!group_ || declared_ || !round_open_()) return next;
  if (progress_.board() && options_.hang.enabled()) {
    consider(progress_.board()->NextDeadline(options_.hang, group_done_));
  }
  if (options_.dstate_timeout.count() > 0) consider(std::max(next_dstate_check_, now));
  return next;
}

void HangWatch::CheckDState(Clock::time_point now) {
  if (options_.dstate_timeout.count() <= 0 || now < next_dstate_check_) return;
  next_dstate_check_ = now + dstate_.interval();
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (!w.process.running()) continue;
    std::optional<Clock::time_point> since =
        dstate_.Observe(w.process.pid(), ThreadsInUninterruptibleSleep(w.process.pid()), now);
    if (!since) continue;
    progress::Hang h;
    h.local_rank = w.local_rank;
    h.rule = "dstate";
    h.stuck_for = std::chrono::duration_cast<Millis>(now - *since);
    h.limit = options_.dstate_timeout;
    if (progress_.board()) h.step = progress_.board()->ranks()[w.local_rank].step;
    return Declare(h, DescribeDState(h, ReadProcFile(w.process.pid(), "wchan")));
  }
}

void HangWatch::Declare(const progress::Hang& hang, const std::string& what) {
  declared_ = true;
  ++counters_.hangs;
  const WorkerGroup::Worker& w = std::as_const(*group_).workers()[hang.local_rank];
  spdlog::error("hang detected at worker rank {} (local rank {}, pid {}): {}; collecting every worker's stacks",
                w.global_rank, w.local_rank, w.process.pid(), what);
  pending_ = PendingHang{hang, what, std::nullopt, std::nullopt};
  StartStackDump();
}

bool HangWatch::HoldsStop(bool stacks) {
  if (stacks) {
    if (view_ && view_->stacks_round == round_ && stacks_taken_round_ != round_) StartStackDump();
    if (StackDumpPending()) return true;
  }
  return pending_ && !Report();
}

WorkerFailure HangWatch::FailureOf(int local_rank) const {
  const WorkerGroup::Worker& w = std::as_const(*group_).workers()[local_rank];
  WorkerFailure f;
  f.host = LocalHostName();
  f.global_rank = w.global_rank;
  f.local_rank = w.local_rank;
  f.pid = w.process.pid();
  f.exit_code = kHangExitCode;
  f.kind = rdzv::FailureKind::kHang;
  return f;
}

bool HangWatch::Report() {
  PendingHang& p = *pending_;
  const std::string attempt_dir = launch_layout::AttemptDir(paths_.error_root, round_);
  if (!p.failure) {
    std::vector<RankStacks> stacks;
    std::vector<int64_t> global_rank_of;
    for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
      stacks.push_back({w.local_rank, WaitsInCollective(launch_layout::StacksFile(w.dir))});
      global_rank_of.push_back(w.global_rank);
    }
    const HangBlame blame = BlameHang(p.hang.local_rank, p.hang.limit, stacks, global_rank_of, nodes_);
    WorkerFailure f = FailureOf(blame.local_rank);
    if (!blame.note.empty()) spdlog::error("rank {} is the likely culprit{}", f.global_rank, blame.note);
    f.message = absl::StrCat(p.what, blame.note, "; stacks: ", attempt_dir, "/<local rank>/stacks.txt on each node");
    p.failure = f;
    if (blame.hold) {
      // Every rank here waits for someone: a node whose rank is elsewhere tells more. Give it a
      // moment to report first (the round then ends, and this report is not needed).
      p.report_after = options_.now() + *blame.hold;
      spdlog::warn(
          "every local rank waits in a collective; holding the hang report for {:.1f} s for a node with "
          "the culprit",
          blame.hold->count() / 1000.0);
    }
  }
  const bool still_ours = view_ && view_->phase == rdzv::JobPhase::kRunning && view_->round == round_;
  if (p.report_after && still_ours && options_.now() < *p.report_after) return false;
  WorkerFailure f = std::move(*p.failure);  // set above
  const progress::Hang hang = std::move(p.hang);
  pending_.reset();
  if (!still_ours && f.kind == rdzv::FailureKind::kHang && view_ && view_->stacks_round == round_) {
    spdlog::info("another node reported the hang first");
    return true;
  }
  f.time_unix_ms = UnixMillisNowAsFilesSeeIt();  // compared with error files' times
  events_.Record("hang", round_,
                 {{"rank", f.global_rank},
                  {"local_rank", f.local_rank},
                  {"worker_pid", f.pid},
                  {"detected_at_rank", group_->workers()[hang.local_rank].global_rank},
                  {"rule", hang.rule},
                  {"section", hang.section},
                  {"step", hang.step},
                  {"stuck_ms", hang.stuck_for.count()},
                  {"limit_ms", hang.limit.count()},
                  {"stacks_dir", attempt_dir},
                  {"message", f.message}});
  report_(std::move(f));
  return true;
}

void HangWatch::StartStackDump() {
  stacks_taken_round_ = round_;
  std::vector<StackDumper::Target> targets;
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (!w.process.running()) continue;
    StackDumper::Target t;
    t.local_rank = w.local_rank;
    t.pid = w.process.pid();
    if (progress_.board()) t.stack_signal = progress_.board()->ranks()[w.local_rank].stack_signal;
    t.file = launch_layout::StacksFile(w.dir);
    targets.push_back(t);
  }
  const bool needs_tool = std::any_of(targets.begin(), targets.end(), [](const auto& t) { return t.stack_signal == 0; });
  std::string tool = needs_tool ? StackDumper::FindTool() : "";
  if (needs_tool && tool.empty()) {
    spdlog::warn("no stack tool for workers that did not register a stack signal: install elfutils (eu-stack) or gdb");
  }
  dumper_.Start(std::move(targets), tool, options_.now());
}

bool HangWatch::StackDumpPending() {
  if (!dumper_.active()) return false;
  if (!dumper_.Finished(options_.now())) return true;
  std::vector<std::string> files = dumper_.Finish();
  events_.Record("stacks", round_, {{"files", files}});
  if (!files.empty()) {
    spdlog::warn("stacks of {} worker(s) written: {}{}", files.size(), files[0], files.size() > 1 ? ", ..." : "");
  }
  return false;
}

}  // namespace dtrun
