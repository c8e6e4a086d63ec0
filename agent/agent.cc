#include "agent/agent.h"

#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/env_names.h"
#include "base/host_name.h"
#include "base/process_table.h"
#include "base/signal_names.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

sigset_t AgentSignalSet(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals) sigaddset(&set, s);
  return set;
}

// A failure as the event log writes it (docs/DESIGN.md, "Event log"): signals by name, as in
// worker_exit records.
nlohmann::json FailureRecord(const WorkerFailure& f) {
  return {{"rank", f.global_rank}, {"local_rank", f.local_rank}, {"host", f.host}, {"worker_pid", f.pid},
          {"exit_code", f.exit_code}, {"signal", f.signal ? SignalName(f.signal) : ""},
          {"kind", f.kind == rdzv::FailureKind::kExited ? "exited" : rdzv::FailureKindName(f.kind)}};
}

// Failures of this node's workers that came after the round's failure report (a second rank that
// failed on its own while the group was being stopped): shown under "Other failures".
void AddUnreported(const std::vector<WorkerFailure>& local, std::vector<WorkerFailure>& reported) {
  for (const WorkerFailure& f : local) {
    bool known = std::any_of(reported.begin(), reported.end(), [&](const WorkerFailure& r) {
      return r.pid == f.pid && r.global_rank == f.global_rank && r.host == f.host;
    });
    if (!known) reported.push_back(f);
  }
}

}  // namespace

void BlockAgentSignals(const std::vector<int>& signals) {
  sigset_t set = AgentSignalSet(signals);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Agent::Agent(AgentOptions options, AttemptPaths paths, std::map<std::string, std::string> base_env,
             std::unique_ptr<rdzv::RoundSource> rounds, const StdioWriters& stdio)
    : options_(std::move(options)), paths_(std::move(paths)), base_env_(std::move(base_env)),
      rounds_(std::move(rounds)), stdio_(stdio), consoles_(Consoles::ForStdio(stdio)) {
  std::vector<std::string> event_files;
  if (!paths_.log_root.empty()) event_files.push_back(paths_.log_root + "/events.jsonl");
  if (!options_.event_log.empty()) event_files.push_back(options_.event_log);
  events_ = EventLog(event_files, options_.run_id, LocalHostName());
}

Agent::~Agent() = default;

bool Agent::StartLoop() {
  sigset_t set = AgentSignalSet(options_.signals_to_handle);
  signal_fd_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create(options_.now);
  if (loop.ok()) loop_ = std::move(*loop);
  if (loop_) console_ = std::make_unique<WorkerConsole>(*loop_, stdio_, consoles_);
  if (!signal_fd_.valid() || !loop_ || !loop_->Watch(signal_fd_.get(), EPOLLIN, [this](uint32_t) { OnSignals(); }) ||
      !loop_->Watch(rounds_->event_fd(), EPOLLIN, [this](uint32_t) { OnRoundEvent(); }) ||
      !console_->Start(STDIN_FILENO, options_.input_echoed_elsewhere)) {
    spdlog::error("cannot set up the event loop (signalfd/epoll): {}; raise the open-files limit (ulimit -n)",
                  strerror(errno));
    return false;
  }
  snapshots_ = std::make_unique<SnapshotRecovery>(*loop_, events_, options_);
  snapshots_->Start(std::exchange(replication_, std::nullopt));
  progress_ = std::make_unique<ProgressChannel>(*loop_, options_,
                                                [this](int lr, const progress::Report& r) { OnReport(lr, r); });
  progress_->Open();
  hangs_ = std::make_unique<HangWatch>(
      options_, paths_, events_, counters_, *progress_, view_,
      [this] { return group_ && !stopping_ && !OutcomeReported(); },
      [this](WorkerFailure f) {
        breaker_.MarkIfNoProgress(f, board());
        rounds_->ReportFailure(group_round_, {f});
      });
  timers_ = std::make_unique<FileTimerService>(*loop_, events_, options_.now, UnixSecondsNow);
  if (!options_.timer_file.empty()) timers_->Open(options_.timer_file);
  status_ = std::make_unique<StatusPublisher>(options_, *stdio_.out, events_, *rounds_, counters_,
                                              [this](Clock::time_point now) { return DescribeNode(now); });
  status_->Start();
  for (AgentComponent* c : std::initializer_list<AgentComponent*>{console_.get(), snapshots_.get(), progress_.get(),
                                                                  hangs_.get(), timers_.get(), status_.get()}) {
    components_.Add(*c);
  }
  return true;
}

int Agent::Run() {
  if (!StartLoop()) {
    rounds_->Leave();
    return 1;
  }
  // Orphaned grandchildren (e.g. data-loader processes) are re-parented to us, so we can end them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  events_.Record("agent_start", -1, {{"launch_id", options_.launch_id}, {"nproc_per_node", options_.nproc_per_node},
                                     {"program", options_.program_name}, {"max_restarts", options_.max_restarts}});
  while (!exit_code_) {
    loop_->RunOnce(NextDeadline());
    KillAfterGrace();
    components_.OnWake(options_.now());
    Step();
  }
  status_->Stop();
  return *exit_code_;
}

std::optional<Clock::time_point> Agent::NextDeadline() const {
  std::optional<Clock::time_point> next = components_.NextDeadline();
  for (std::optional<Clock::time_point> t :
       {stopping_ && !killed_ ? std::optional(stop_.deadline()) : std::nullopt, barrier_deadline_}) {
    if (t && (!next || *t < *next)) next = t;
  }
  return next;
}

void Agent::OnSignals() {
  signalfd_siginfo info;
  while (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
    if (static_cast<int>(info.ssi_signo) == SIGCHLD) {
      ReapChildren();
    } else {
      OnSignal(static_cast<int>(info.ssi_signo));
    }
  }
}

void Agent::KillAfterGrace() {
  const Clock::time_point now = options_.now();
  if (stopping_ && !killed_ && group_ && now >= stop_.deadline()) {
    spdlog::warn("workers did not stop within {} ms{}; sending SIGKILL", stop_.waited(now).count(),
                 stop_.keeping() ? " (one was still keeping its state in memory)" : "");
    group_->SignalAll(SIGKILL);
    killed_ = true;
  }
}

void Agent::OnSignal(int signo) {
  if (++signals_received_ > 1 && group_) {
    spdlog::warn("received {} again; killing workers now", SignalName(signo));
    group_->SignalAll(SIGKILL);
    killed_ = true;
    return;
  }
  if (interrupt_signal_ != 0) return;
  spdlog::warn("received {}; forwarding it to the workers (they get SIGKILL after {} ms; send it "
               "again to kill them now)",
               SignalName(signo), options_.shutdown_timeout.count());
  interrupt_signal_ = signo;
  events_.Record("signal", group_round_, {{"signal", SignalName(signo)}});
  if (group_) StopGroup(signo);
}

void Agent::OnRoundEvent() {
  absl::StatusOr<std::optional<rdzv::NodeView>> latest = rounds_->Latest();
  if (!latest.ok()) {
    if (source_error_.ok()) source_error_ = latest.status();
    return;
  }
  if (!latest->has_value()) return;  // joined, no view yet
  const rdzv::NodeView* view = &**latest;
  // Say once why a round ended, whether the next one starts at once or has to wait.
  const bool in_play = view->phase == rdzv::JobPhase::kRunning || view->phase == rdzv::JobPhase::kForming;
  if (in_play && !view->reason.empty() && view->reason != logged_reason_) {
    logged_reason_ = view->reason;
    events_.Record("round_end", view->phase == rdzv::JobPhase::kRunning ? view->round - 1 : view->round,
                   {{"reason", view->reason}});
    if (view->phase == rdzv::JobPhase::kRunning) {
      spdlog::warn("round {}: {}", view->round, view->reason);
    } else if (interrupt_signal_ != 0) {
      // This node stops too (a scheduler signals every node at once): it waits for no one.
      spdlog::info("round {} ended: {}", view->round, view->reason);
    } else {
      // Static jobs say whom they wait for and how long; otherwise the next round just forms.
      spdlog::warn("round {} ended: {}; waiting for {}", view->round, view->reason,
                   view->awaited.empty() ? "the next round" : view->awaited);
    }
  }
  if (view->role == rdzv::NodeRole::kSpare && (!view_ || view_->role != rdzv::NodeRole::kSpare)) {
    spdlog::info("round {} is full; this node waits as a spare", view->round);
  }
  // A spare promoted into a round takes over a lost node's ranks: that is a recovery too, followed
  // from the promotion to its ranks stepping (with where their state came from).
  if (view_ && view_->role == rdzv::NodeRole::kSpare && view->role != rdzv::NodeRole::kSpare &&
      !snapshots_->recovering()) {
    snapshots_->OnFailure(-1);
  }
  view_ = **latest;
}

void Agent::ReapChildren() {
  progress_->ReadPending();  // before a dead worker's pid stops counting as the round's
  int status = 0;
  pid_t pid;
  bool ours = false;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    // Other PIDs are stack tools or adopted descendants: reaped, nothing more.
    if (hangs_->OnExit(pid)) continue;
    if (warm_.OnExit(pid, status)) continue;
    if (group_ && group_->OnExit(pid, status)) {
      ours = true;
      RecordExit(pid, status);
    }
  }
  if (!ours || !group_) return;
  // The first failure of a round is reported at once: every node restarts within a round trip.
  if (!OutcomeReported() && !group_->failures().empty() && !stopping_) {
    reported_ = true;
    std::vector<WorkerFailure> failures = RootCauseFirst(group_->failures());
    breaker_.MarkIfNoProgress(failures[0], board());
    StopGroup(SIGTERM);
    nlohmann::json failure = FailureRecord(failures[0]);
    failure["message"] = failures[0].message.substr(0, 1024);
    failure["error_file"] = failures[0].error_file;
    events_.Record("failure", group_round_, failure);
    rounds_->ReportFailure(group_round_, failures);
  }
  if (group_->all_exited()) OnGroupExited();
}

void Agent::OnGroupExited() {
  // Outputs drained, a pending hang reported, timers disarmed, the recovery's stop noted.
  components_.OnGroupExited(*group_);
  round_failures_ = group_->failures();
  counters_.worker_failures += static_cast<int64_t>(round_failures_.size());
  counters_.oom_kills += std::count_if(round_failures_.begin(), round_failures_.end(), [](const WorkerFailure& f) {
    return f.kind == rdzv::FailureKind::kOomKilled;
  });
  breaker_.OnAttemptEnded(board());
  KillStrays();
  const bool reported_success = !OutcomeReported() && !stopping_ && group_->all_succeeded();
  if (reported_success) {
    reported_ = true;
    warm_.Clear();  // this node's part is done: nothing will restart
    events_.Record("success", group_round_, nlohmann::json::object());
    rounds_->ReportSuccess(group_round_);
    if (rounds_->exit_barrier_timeout().count() > 0) {
      barrier_deadline_ = options_.now() + rounds_->exit_barrier_timeout();
    }
  }
  // A round that ended before it trained (a restart into a round that never formed, as when a node
  // is lost just after a worker failed) may have used up the parked workers.
  if (!reported_success && interrupt_signal_ == 0) warm_.RefillIfEmpty(group_->requests(), WarmDepth());
  group_.reset();
  stopping_ = false;
  killed_ = false;
  stop_.Reset();
}

void Agent::Step() {
  if (group_) {
    // A running group is stopped when the job no longer wants it.
    bool wanted = interrupt_signal_ == 0 && source_error_.ok() && view_ && !hangs_->declared() &&
                  view_->phase == rdzv::JobPhase::kRunning && view_->assignment &&
                  view_->assignment->round == group_round_;
    if (wanted || stopping_) return;  // running, or waiting for the group to exit
    // A hang ended the round (here or on another node): stacks first, while every rank is still
    // where it hung, then its report. An interrupt takes no stacks.
    if (hangs_->HoldsStop(/*stacks=*/interrupt_signal_ == 0)) return;
    StopGroup(interrupt_signal_ ? interrupt_signal_ : SIGTERM);
    return;
  }
  if (interrupt_signal_ != 0) {
    rounds_->Leave();
    spdlog::warn("stopped by {}; all workers have exited", SignalName(interrupt_signal_));
    return Finish(128 + interrupt_signal_);
  }
  if (!source_error_.ok()) {
    spdlog::error("{}", std::string(source_error_.message()));
    return Finish(1);
  }
  if (!view_) return;
  ParkForPromotion();
  const bool over = view_->phase == rdzv::JobPhase::kSucceeded || view_->phase == rdzv::JobPhase::kFailed ||
                    view_->phase == rdzv::JobPhase::kKilled;
  if (over) rounds_->Leave();  // lets the service host know this node has seen the end
  switch (view_->phase) {
    case rdzv::JobPhase::kSucceeded:
      if (std::string line = snapshots_->Summary(); !line.empty()) spdlog::info("{}", line);
      if (std::string line = status_->Summary(); !line.empty()) spdlog::warn("{}", line);
      return Finish(0);
    case rdzv::JobPhase::kKilled:
      spdlog::warn("the job was killed: {}", view_->reason);
      return Finish(128 + SIGTERM);
    case rdzv::JobPhase::kFailed: {
      if (view_->failures.empty()) {
        spdlog::error("the job failed: {}", view_->reason);
        return Finish(view_->exit_code ? view_->exit_code : 1);
      }
      std::vector<WorkerFailure> failures = view_->failures;
      if (view_->round == group_round_) AddUnreported(round_failures_, failures);
      std::string summary = FormatFailureSummary(options_.program_name, failures);
      if (!options_.launcher_error_file.empty()) {
        // As torchrun's @record: the root cause where our own caller (TorchX, a scheduler) looks.
        absl::Status written = WriteFileAtomically(options_.launcher_error_file, LauncherErrorRecord(failures), 0644);
        if (!written.ok()) spdlog::warn("TORCHELASTIC_ERROR_FILE: {}", std::string(written.message()));
      }
      for (const std::string& line : {options_.interpreter_note, snapshots_->Summary(), status_->Summary()}) {
        if (!line.empty()) absl::StrAppend(&summary, line, "\n");
      }
      consoles_.err->WriteBlock(summary);
      return Finish(view_->exit_code);
    }
    case rdzv::JobPhase::kRunning:
      if (view_->assignment && view_->assignment->round != group_round_) {
        if (!snapshots_->ReadyFor(*view_->assignment)) return;  // fetching buddy copies
        return StartRound(*view_->assignment);
      }
      break;
    case rdzv::JobPhase::kForming:
      break;
  }
  if (barrier_deadline_ && options_.now() >= *barrier_deadline_) {
    spdlog::warn("this node's workers finished but the others did not within the exit barrier; exiting");
    rounds_->Leave();
    return Finish(0);
  }
}

WorkerGroup::Io Agent::RoundIo() {
  WorkerGroup::Io io{consoles_, console_->routes_stdin(), {}, {}, &warm_, &oom_};
  snapshots_->AddRegionsTo(io);
  return io;
}

void Agent::ParkForPromotion() {
  // A spare has run nothing: it learns from the rendezvous that the job's program parks, and
  // parks its workers with a placeholder layout (the release brings the real one).
  if (group_ || !view_ || view_->role != rdzv::NodeRole::kSpare || !view_->program_parks) return;
  if (warm_.off() || warm_.size() > 0) return;
  rdzv::Assignment placeholder;
  placeholder.round = view_->round;
  placeholder.world_size = options_.nproc_per_node;
  placeholder.group_world_size = 1;
  warm_.Fill(WorkerGroup::SpawnRequests(options_, base_env_, paths_, placeholder, RoundIo()), /*depth=*/2);
}

void Agent::StartRound(const rdzv::Assignment& a) {
  ++counters_.rounds;
  group_round_ = a.round;
  group_nodes_ = a.group_world_size;
  reported_ = false;
  barrier_deadline_.reset();
  absl::StatusOr<std::unique_ptr<WorkerGroup>> group = WorkerGroup::Start(options_, base_env_, paths_, a, RoundIo());
  if (!group.ok()) {
    spdlog::error("{}", std::string(group.status().message()));
    KillStrays();
    rounds_->Leave();
    return Finish(1);
  }
  group_ = std::move(*group);
  events_.Record("round_start", a.round, {{"world_size", a.world_size}, {"rank_offset", a.rank_offset},
                                          {"group_rank", a.group_rank}, {"group_world_size", a.group_world_size},
                                          {"master", absl::StrCat(a.master_addr, ":", a.master_port)}});
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    events_.Record("worker_start", a.round, {{"rank", w.global_rank}, {"local_rank", w.local_rank},
                                             {"worker_pid", w.process.pid()}, {"warm", w.warm}});
  }
  components_.OnRoundStarted(*group_, a);
}

std::chrono::milliseconds Agent::StopGrace() const {
  // An interrupt (Ctrl-C, a scheduler's notice) always gets the whole timeout; after a failure,
  // less when every rank's state is in an in-memory snapshot (SnapshotRecovery::StopGrace).
  if (interrupt_signal_ != 0) return options_.shutdown_timeout;
  return snapshots_->StopGrace(options_.shutdown_timeout);
}

void Agent::StopGroup(int signo) {
  if (interrupt_signal_ == 0) snapshots_->OnFailure(board() ? board()->furthest_step() : -1);
  stopping_ = true;
  killed_ = false;
  group_->SignalAll(signo);
  stop_.Begin(options_.now(), StopGrace(), options_.shutdown_timeout);
}

void Agent::RecordExit(pid_t pid, int wait_status) {
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (w.process.pid() != pid) continue;
    stop_.Done(w.local_rank);
    events_.Record("worker_exit", group_round_,
                   {{"rank", w.global_rank}, {"local_rank", w.local_rank}, {"worker_pid", pid},
                    {"exit_code", WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1},
                    {"signal", WIFSIGNALED(wait_status) ? SignalName(WTERMSIG(wait_status)) : ""},
                    {"stopped_by_dtrun", stopping_},
                    {"last_step", board() ? board()->ranks()[w.local_rank].step : -1}});
    return;
  }
}

// The job-wide summary record: how this node's agent ended and why.
void Agent::RecordEnd(int code) {
  nlohmann::json end = {{"exit_code", code}, {"interrupted_by", interrupt_signal_ ? SignalName(interrupt_signal_) : ""}};
  if (view_) {
    end["phase"] = rdzv::PhaseName(view_->phase);
    end["reason"] = view_->reason;
    end["rounds"] = view_->round + 1;
    if (!view_->failures.empty()) end["root_cause"] = FailureRecord(view_->failures[0]);
  }
  if (!source_error_.ok()) end["error"] = std::string(source_error_.message());
  events_.Record("agent_end", group_round_, end);
}

void Agent::KillStrays() {
  // Descendants that left the workers' process groups: found by the launch marker, and — because
  // the agent is a subreaper — as our own adopted children (which also covers a process caught
  // mid-exec, when /proc/PID/environ can read empty). Killing one can orphan more: repeat.
  const pid_t self = ::getpid();
  for (int round = 0; round < 3; ++round) {
    std::vector<ProcessEntry> strays = FindProcessesWithEnv(env::kLaunchId, options_.launch_id);
    for (ProcessEntry& child : ChildrenOf(self)) {
      bool known = child.pid == options_.guard_pid ||
                   std::any_of(strays.begin(), strays.end(), [&](const ProcessEntry& s) { return s.pid == child.pid; });
      if (!known) strays.push_back(child);
    }
    // Parked workers carry the launch id and are our children, but are no strays; nor is what they
    // started before their round (a pyenv shim's subshell, a helper an import spawned). A parked
    // worker leads its own process group: its group is itself and what stayed in it; its children
    // that left it have it as their parent.
    strays.erase(std::remove_if(strays.begin(), strays.end(),
                                [this](const ProcessEntry& p) { return warm_.Holds(p.pgid) || warm_.Holds(p.ppid); }),
                 strays.end());
    if (strays.empty()) break;
    if (round == 0) {
      events_.Record("strays_killed", group_round_, {{"count", strays.size()}});
      spdlog::warn("ending {} leftover process(es) started by the workers (e.g. pid {}{}{})", strays.size(),
                   strays[0].pid, strays[0].cmdline.empty() ? "" : ": ", strays[0].cmdline.substr(0, 80));
    }
    TerminateProcesses(strays, SIGKILL, std::chrono::milliseconds(0));
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
}

}  // namespace dtrun
