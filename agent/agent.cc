#include "agent/agent.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "agent/tcp_store_server.h"
#include "base/env_names.h"
#include "base/process_table.h"
#include "base/signal_names.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

sigset_t AgentSignalSet(const std::vector<int>& signals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : signals) sigaddset(&set, s);
  return set;
}

std::string HostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

void BlockAgentSignals(const std::vector<int>& signals) {
  sigset_t set = AgentSignalSet(signals);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Agent::Agent(AgentOptions options, AttemptPaths paths, std::map<std::string, std::string> base_env)
    : options_(std::move(options)), paths_(std::move(paths)), base_env_(std::move(base_env)) {}

Agent::~Agent() = default;

int Agent::Run() {
  const std::string bind =
      options_.store_bind_addr.empty() ? options_.master_addr : options_.store_bind_addr;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> store =
      TcpStoreServer::Start(bind, static_cast<uint16_t>(options_.master_port));
  if (!store.ok()) {
    spdlog::error("{}", std::string(store.status().message()));
    return 1;
  }
  store_ = std::move(*store);
  sigset_t set = AgentSignalSet(options_.signals_to_handle);
  signal_fd_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_fd_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = signal_fd_.get();
  ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, signal_fd_.get(), &ev);
  // Orphaned grandchildren (e.g. data-loader processes) are re-parented to us, so we can end them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<std::unique_ptr<WorkerGroup>> group =
        WorkerGroup::Start(options_, base_env_, paths_, attempt, store_->port());
    if (!group.ok()) {
      spdlog::error("{}", std::string(group.status().message()));
      KillStrays();
      return 1;
    }
    WatchOutputs(**group);
    Outcome outcome = RunAttempt(**group);
    (*group)->DrainAndCloseOutputs();
    KillStrays();
    if (outcome == Outcome::kFailed && attempt < options_.max_restarts && stop_signal_ == 0) {
      const WorkerFailure& f = (*group)->failures()[RootCauseIndex((*group)->failures())];
      spdlog::warn("worker rank {} (local {}) failed with {}; restarting the worker group ({}/{})",
                   f.global_rank, f.local_rank,
                   f.signal ? SignalName(f.signal) : absl::StrCat("exit code ", f.exit_code),
                   attempt + 1, options_.max_restarts);
      continue;
    }
    return Finish(outcome, **group);
  }
}

void Agent::WatchOutputs(WorkerGroup& group) {
  for (WorkerGroup::Worker& w : group.workers()) {
    for (UniqueFd* fd : {&w.process.stdout_fd(), &w.process.stderr_fd()}) {
      if (!fd->valid()) continue;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd->get();
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd->get(), &ev);
    }
  }
}

Agent::Outcome Agent::RunAttempt(WorkerGroup& group) {
  stopping_ = stop_signal_ != 0;
  killed_ = false;
  if (stopping_) group.SignalAll(stop_signal_);  // interrupted between attempts
  kill_deadline_ = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  epoll_event events[32];
  for (;;) {
    if (group.all_exited()) {
      if (stop_signal_ != 0) return Outcome::kInterrupted;
      return group.failures().empty() ? Outcome::kSucceeded : Outcome::kFailed;
    }
    if (!stopping_ && !group.failures().empty()) {
      stopping_ = true;
      group.SignalAll(SIGTERM);
      kill_deadline_ = std::chrono::steady_clock::now() + options_.shutdown_timeout;
    }
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          kill_deadline_ - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    int n = ::epoll_wait(epoll_fd_.get(), events, 32, timeout_ms);
    if (stopping_ && !killed_ && std::chrono::steady_clock::now() >= kill_deadline_) {
      spdlog::warn("workers did not stop within {} ms; sending SIGKILL", options_.shutdown_timeout.count());
      group.SignalAll(SIGKILL);
      killed_ = true;
    }
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == signal_fd_.get()) {
        signalfd_siginfo info;
        while (::read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
          if (static_cast<int>(info.ssi_signo) == SIGCHLD) {
            ReapChildren(group);
          } else {
            OnSignal(static_cast<int>(info.ssi_signo), group);
          }
        }
        continue;
      }
      for (WorkerGroup::Worker& w : group.workers()) {
        UniqueFd* pipe = w.process.stdout_fd().get() == fd   ? &w.process.stdout_fd()
                         : w.process.stderr_fd().get() == fd ? &w.process.stderr_fd()
                                                             : nullptr;
        if (pipe == nullptr) continue;
        OutputRelay& relay = pipe == &w.process.stdout_fd() ? *w.out : *w.err;
        if (!relay.DrainFrom(fd)) {
          relay.Flush();
          pipe->Reset();  // closing also removes it from the epoll set
        }
        break;
      }
    }
  }
}

void Agent::OnSignal(int signo, WorkerGroup& group) {
  if (++signals_received_ > 1) {
    spdlog::warn("received {} again; killing workers now", SignalName(signo));
    group.SignalAll(SIGKILL);
    killed_ = true;
    return;
  }
  spdlog::warn("received {}; forwarding it to the workers (they get SIGKILL after {} ms; send it "
               "again to kill them now)",
               SignalName(signo), options_.shutdown_timeout.count());
  stop_signal_ = signo;
  stopping_ = true;
  group.SignalAll(signo);
  kill_deadline_ = std::chrono::steady_clock::now() + options_.shutdown_timeout;
}

void Agent::ReapChildren(WorkerGroup& group) {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    group.OnExit(pid, status);  // other PIDs are adopted descendants: reaped, nothing more
  }
}

void Agent::KillStrays() {
  std::vector<ProcessEntry> strays = FindProcessesWithEnv(env::kLaunchId, options_.launch_id);
  if (!strays.empty()) {
    spdlog::warn("ending {} leftover process(es) started by the workers (e.g. pid {}: {})",
                 strays.size(), strays[0].pid, strays[0].cmdline.substr(0, 80));
    TerminateProcesses(strays, SIGKILL, std::chrono::milliseconds(0));
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

int Agent::Finish(Outcome outcome, const WorkerGroup& group) {
  switch (outcome) {
    case Outcome::kSucceeded:
      return 0;
    case Outcome::kInterrupted:
      spdlog::warn("stopped by {}; all workers have exited", SignalName(stop_signal_));
      return 128 + stop_signal_;
    case Outcome::kFailed: {
      const std::vector<WorkerFailure>& failures = group.failures();
      std::string summary = FormatFailureSummary(options_.program_name, HostName(), failures);
      WriteAll(STDERR_FILENO, summary.data(), summary.size());
      return ExitCodeOf(failures[RootCauseIndex(failures)]);
    }
  }
  return 1;
}

}  // namespace dtrun
