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
          {"exit_code", f.exit_code}, {"signal", f.signal ? SignalName(f.signal) : ""}};
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

bool Agent::StartBuddyReplication() {
  if (!replication_ || !snapshots_.enabled()) return false;
  replicator_ = std::make_unique<Replicator>(std::move(*replication_), snapshots_, snapshot::JobHash(options_.run_id));
  replication_.reset();
  if (!Watch(replicator_->event_fd())) {
    spdlog::warn("cannot watch the buddy-copy fetch ({}); training without buddy copies", strerror(errno));
    replicator_.reset();
    return false;
  }
  return true;
}

bool Agent::Watch(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

int Agent::Run() {
  sigset_t set = AgentSignalSet(options_.signals_to_handle);
  signal_fd_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_fd_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!signal_fd_.valid() || !epoll_fd_.valid() || !Watch(signal_fd_.get()) ||
      !Watch(rounds_->event_fd()) || !Watch(stdio_.out->wake_fd()) ||
      (stdio_.err != stdio_.out && !Watch(stdio_.err->wake_fd()))) {
    spdlog::error("cannot set up the event loop (signalfd/epoll): {}; raise the open-files limit (ulimit -n)",
                  strerror(errno));
    rounds_->Leave();
    return 1;
  }
  stdin_ = std::make_unique<StdinRouter>(STDIN_FILENO, epoll_fd_.get());
  if (absl::StatusOr<SnapshotStore> store =
          SnapshotStore::Create(options_.nproc_per_node, options_.snapshot_bytes_per_worker, replication_.has_value());
      store.ok()) {
    snapshots_ = std::move(*store);
    StartBuddyReplication();
  } else {
    spdlog::warn("{}; training without in-memory snapshots (recovery falls back to disk checkpoints)",
                 std::string(store.status().message()));
  }
  OpenProgressChannels();
  StartStatusOutputs();
  // Orphaned grandchildren (e.g. data-loader processes) are re-parented to us, so we can end them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  events_.Record("agent_start", -1, {{"launch_id", options_.launch_id}, {"nproc_per_node", options_.nproc_per_node},
                                     {"program", options_.program_name}, {"max_restarts", options_.max_restarts}});

  epoll_event events[32];
  while (!exit_code_) {
    int n = ::epoll_wait(epoll_fd_.get(), events, 32, timeout_ms());
    HandleEvents(events, std::max(n, 0));
    ShowQuietOutput();
    CheckProgress();
    Step();
    if (!exit_code_) PublishStatus();
  }
  if (options_.progress_line) stdio_.out->SetStatusLine("");
  return *exit_code_;
}

int Agent::timeout_ms() const {
  std::optional<Clock::time_point> next;
  if (stopping_ && !killed_) next = kill_deadline_;
  if (barrier_deadline_ && (!next || *barrier_deadline_ < *next)) next = barrier_deadline_;
  if (std::optional<Clock::time_point> p = ProgressDeadline(); p && (!next || *p < *next)) next = p;
  if (!next || next_status_at_ < *next) next = next_status_at_;
  if (group_) {
    for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
      for (const OutputRelay* relay : {w.out.get(), w.err.get()}) {
        std::optional<Clock::time_point> quiet = relay->quiet_deadline();
        if (quiet && (!next || *quiet < *next)) next = quiet;
      }
    }
  }
  if (!next) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*next - options_.now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

void Agent::HandleEvents(const epoll_event* events, int n) {
  for (int i = 0; i < n; ++i) {
    int fd = events[i].data.fd;
    if (fd == signal_fd_.get()) {
      signalfd_siginfo info;
      while (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
        if (static_cast<int>(info.ssi_signo) == SIGCHLD) {
          ReapChildren();
        } else {
          OnSignal(static_cast<int>(info.ssi_signo));
        }
      }
    } else if (fd == rounds_->event_fd()) {
      OnRoundEvent();
    } else if (replicator_ && fd == replicator_->event_fd()) {
      replicator_->Drain();  // a fetch ended: Step starts the round
    } else if (int lr = ProgressSocketRank(fd); lr >= 0) {
      OnProgressReports(lr);
    } else if (timer_pipe_ && fd == timer_pipe_->fd()) {
      OnTimerRequests();
    } else if (fd == stdio_.out->wake_fd() || fd == stdio_.err->wake_fd()) {
      stdio_.out->ClearWake();
      stdio_.err->ClearWake();
      ResumeOutputs();
    } else if (stdin_->Owns(fd)) {
      stdin_->OnEvent(fd, events[i].events);  // an echoed line is handled in ShowQuietOutput
    } else {
      OnOutput(fd);
    }
  }
  if (stopping_ && !killed_ && group_ && options_.now() >= kill_deadline_) {
    spdlog::warn("workers did not stop within {} ms; sending SIGKILL", StopGrace().count());
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
    } else {
      // Static jobs say whom they wait for and how long; otherwise the next round just forms.
      const bool says_wait = view->reason.find("; waiting for ") != std::string::npos;
      spdlog::warn("round {} ended: {}{}", view->round, view->reason, says_wait ? "" : "; waiting for the next round");
    }
  }
  if (view->role == rdzv::NodeRole::kSpare && (!view_ || view_->role != rdzv::NodeRole::kSpare)) {
    spdlog::info("round {} is full; this node waits as a spare", view->round);
  }
  // A spare promoted into a round takes over a lost node's ranks: that is a recovery too, followed
  // from the promotion to its ranks stepping (with where their state came from).
  if (view_ && view_->role == rdzv::NodeRole::kSpare && view->role != rdzv::NodeRole::kSpare && !recovery_.active()) {
    recovery_.OnFailure(options_.now(), -1);
  }
  view_ = **latest;
}

void Agent::ReapChildren() {
  int status = 0;
  pid_t pid;
  bool ours = false;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    // Other PIDs are stack tools or adopted descendants: reaped, nothing more.
    if (dumper_.OnExit(pid)) continue;
    if (warm_.OnExit(pid, status)) continue;
    if (group_ && group_->OnExit(pid, status)) {
      ours = true;
      RecordExit(pid, status);
    }
  }
  if (!ours || !group_) return;
  // The first failure of a round is reported at once: every node restarts within a round trip.
  if (!reported_ && !group_->failures().empty() && !stopping_) {
    reported_ = true;
    std::vector<WorkerFailure> failures = RootCauseFirst(group_->failures());
    MarkIfNoProgress(failures[0]);
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
  group_->DrainAndCloseOutputs();
  recovery_.OnStopped(options_.now());
  round_failures_ = group_->failures();
  counters_.worker_failures += static_cast<int64_t>(round_failures_.size());
  if (dumper_.active()) dumper_.Finish();  // the workers are gone: nothing more to read
  if (pending_hang_) {
    pending_hang_->report_after.reset();  // the workers are gone: now or never
    ReportHang();
  }
  RememberAttemptProgress();
  board_.reset();
  hang_declared_ = false;
  dstate_since_.clear();
  timers_.Clear();
  KillStrays();
  const bool reported_success = !reported_ && !stopping_ && group_->all_succeeded();
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
  paused_outputs_.clear();  // their pipes are closed
  stdin_->SetWorkers({});
  stopping_ = false;
  killed_ = false;
}

void Agent::Step() {
  if (group_) {
    // A running group is stopped when the job no longer wants it.
    bool wanted = interrupt_signal_ == 0 && source_error_.ok() && view_ && !hang_declared_ &&
                  view_->phase == rdzv::JobPhase::kRunning && view_->assignment &&
                  view_->assignment->round == group_round_;
    if (wanted || stopping_) return;  // running, or waiting for the group to exit
    if (interrupt_signal_ == 0) {
      // A hang ended the round (here or on another node): stacks first, while every rank is
      // still where it hung.
      if (view_ && view_->stacks_round == group_round_ && stacks_taken_round_ != group_round_) StartStackDump();
      if (StackDumpPending()) return;
    }
    if (pending_hang_ && !ReportHang()) return;
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
      if (std::string line = FormatRecoveries(recovery_.completed()); !line.empty()) spdlog::info("{}", line);
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
      if (std::string line = FormatRecoveries(recovery_.completed()); !line.empty()) {
        absl::StrAppend(&summary, line, "\n");
      }
      consoles_.err->WriteBlock(summary);
      return Finish(view_->exit_code);
    }
    case rdzv::JobPhase::kRunning:
      if (view_->assignment && view_->assignment->round != group_round_) {
        if (replicator_ && !replicator_->ReadyFor(*view_->assignment)) return;  // fetching buddy copies
        if (replicator_) {
          for (const std::string& note : replicator_->TakeFetchNotes()) {
            spdlog::info("{}", note);
            events_.Record("buddy_fetch", view_->assignment->round, {{"note", note}});
          }
        }
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
  WorkerGroup::Io io{consoles_, stdin_->mode() == StdinRouter::Mode::kRouted, {}, {}, &warm_};
  for (int lr = 0; snapshots_.enabled() && lr < options_.nproc_per_node; ++lr) {
    io.snapshot_fds.push_back(snapshots_.fd(lr));
    if (snapshots_.replica_fd(lr) >= 0) io.replica_fds.push_back(snapshots_.replica_fd(lr));
  }
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
  recovery_.OnStarted(options_.now(), options_.nproc_per_node);
  board_ = std::make_unique<progress::ProgressBoard>(options_.nproc_per_node);
  hang_declared_ = false;
  events_.Record("round_start", a.round, {{"world_size", a.world_size}, {"rank_offset", a.rank_offset},
                                          {"group_rank", a.group_rank}, {"group_world_size", a.group_world_size},
                                          {"master", absl::StrCat(a.master_addr, ":", a.master_port)}});
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    events_.Record("worker_start", a.round, {{"rank", w.global_rank}, {"local_rank", w.local_rank},
                                             {"worker_pid", w.process.pid()}, {"warm", w.warm}});
  }
  WatchOutputs();
  std::map<int, UniqueFd> stdins;
  for (WorkerGroup::Worker& w : group_->workers()) stdins[w.local_rank] = std::move(w.process.stdin_fd());
  stdin_->SetWorkers(std::move(stdins));
}

std::chrono::milliseconds Agent::StopGrace() const {
  // After a failure, workers whose state is in an in-memory snapshot have nothing left to save, and
  // are usually blocked in a collective with a rank that is gone (a lost node, a hung worker):
  // the whole --shutdown-timeout would be spent waiting there. An interrupt (Ctrl-C, a
  // scheduler's notice) always gets the whole timeout.
  if (interrupt_signal_ != 0 || !snapshots_.enabled()) return options_.shutdown_timeout;
  for (int lr = 0; lr < options_.nproc_per_node; ++lr) {
    if (!snapshots_.Newest(lr)) return options_.shutdown_timeout;
  }
  return std::min(options_.shutdown_timeout, kSnapshottedStopGrace);
}

void Agent::StopGroup(int signo) {
  if (interrupt_signal_ == 0) recovery_.OnFailure(options_.now(), board_ ? board_->best_step() : -1);
  stopping_ = true;
  killed_ = false;
  group_->SignalAll(signo);
  kill_deadline_ = options_.now() + StopGrace();
}

void Agent::WatchOutputs() {
  for (WorkerGroup::Worker& w : group_->workers()) {
    for (UniqueFd* fd : {&w.process.stdout_fd(), &w.process.stderr_fd()}) {
      // A pipe that cannot be watched would never be drained: close it (the worker's writes then
      // fail) rather than let the worker block on a full pipe.
      if (fd->valid() && !Watch(fd->get())) {
        spdlog::warn("cannot watch a worker's output ({}); its output is dropped", strerror(errno));
        fd->Reset();
      }
    }
  }
}

void Agent::OnOutput(int fd) {
  if (!group_) return;
  for (WorkerGroup::Worker& w : group_->workers()) {
    UniqueFd* pipe = w.process.stdout_fd().get() == fd   ? &w.process.stdout_fd()
                     : w.process.stderr_fd().get() == fd ? &w.process.stderr_fd()
                                                         : nullptr;
    if (pipe == nullptr) continue;
    OutputRelay& relay = pipe == &w.process.stdout_fd() ? *w.out : *w.err;
    if (relay.congested()) return PauseOutput(fd);
    if (!relay.DrainFrom(fd, options_.now())) {
      relay.Flush();
      pipe->Reset();  // closing also removes it from the epoll set
    }
    return;
  }
}

void Agent::PauseOutput(int fd) {
  // Removed, not just muted: a muted fd would still report the hang-up of an exited worker.
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, fd, nullptr) == 0) paused_outputs_.push_back(fd);
}

void Agent::ResumeOutputs() {
  for (int fd : std::exchange(paused_outputs_, {})) {
    if (!Watch(fd)) spdlog::warn("cannot watch a worker's output again: {}", strerror(errno));
  }
}

void Agent::ShowQuietOutput() {
  if (!group_) return;
  const Clock::time_point now = options_.now();
  for (WorkerGroup::Worker& w : group_->workers()) {
    for (OutputRelay* relay : {w.out.get(), w.err.get()}) {
      relay->ShowIfQuiet(now);
      if (relay->TakePrompted()) stdin_->OnPrompt(w.local_rank);
    }
  }
  if (stdin_->TakeEchoedLine()) consoles_.ForgetOpenLines();
}

void Agent::RecordExit(pid_t pid, int wait_status) {
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    if (w.process.pid() != pid) continue;
    events_.Record("worker_exit", group_round_,
                   {{"rank", w.global_rank}, {"local_rank", w.local_rank}, {"worker_pid", pid},
                    {"exit_code", WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1},
                    {"signal", WIFSIGNALED(wait_status) ? SignalName(WTERMSIG(wait_status)) : ""},
                    {"stopped_by_dtrun", stopping_},
                    {"last_step", board_ ? board_->ranks()[w.local_rank].step : -1}});
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
    // Parked workers carry the launch id and are our children, but are no strays.
    strays.erase(std::remove_if(strays.begin(), strays.end(), [this](const ProcessEntry& p) { return warm_.Holds(p.pid); }),
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
