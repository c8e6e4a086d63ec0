#include "launcher/ssh_launcher.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/child_process.h"
#include "base/event_loop.h"
#include "base/executable.h"
#include "base/signal_names.h"
#include "base/unique_fd.h"
#include "launcher/summary_dedup.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace dtrun {
namespace {

using Clock = EventLoop::Clock;
using std::chrono::seconds;

constexpr size_t kMaxLine = 64 * 1024;  // a longer line is passed on in pieces of this size
// After a stop is asked for: the hosts' own shutdown timeout, then this long, before their ssh
// processes are killed (which ends their stdin, the same stop again on their side).
constexpr seconds kKillAfterShutdown{15};
// A host gone while too few are left: the others get this long to end on their own (a failed
// job ends every node) before they are stopped.
constexpr seconds kGraceAfterHostLoss{10};
constexpr seconds kOutputAfterExit{2};  // output still arriving once every ssh has ended
// Once a host finished the job, the others end within the rendezvous' exit barrier (5 min by
// default); a host still there a minute after that (its ssh stuck on a dead link) is stopped.
constexpr seconds kOthersAfterSuccess{360};

struct Stream {
  UniqueFd fd;
  std::string partial;
  bool to_stderr = false;
};

struct Host {
  int index = 0;
  std::string name;
  std::optional<ChildProcess> ssh;
  UniqueFd control;  // the ssh's stdin
  Stream out, err;
  bool exited = false;
  int code = 0;
};

std::string ExitMeaning(int code) {
  if (code == 255) return "ssh could not reach the host or log in, or the connection broke";
  if (code == 127) return "no dtrun at that path there; install it or give --remote-dtrun PATH";
  return "its lines above say why";
}

class SshLauncher {
 public:
  SshLauncher(const SshLaunch& launch, const StdioWriters& stdio) : launch_(launch), stdio_(stdio) {}

  int Run() {
    absl::Status ready = SetUp();
    if (!ready.ok()) {
      spdlog::error("{}", std::string(ready.message()));
      StopAll(SIGTERM);
    }
    while (!Finished()) {
      loop_->RunOnce(NextDeadline());
      OnTimers();
    }
    if (summaries_.dropped() > 0) {
      spdlog::info("({} other host{} printed the same failure summary)", summaries_.dropped(),
                   summaries_.dropped() == 1 ? "" : "s");
    }
    if (interrupt_ != 0) return 128 + interrupt_;
    if (!ready.ok()) return 1;
    return failure_code_;
  }

 private:
  absl::Status SetUp() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&set, s);
    ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
    signals_ = UniqueFd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create([] { return Clock::now(); });
    if (!signals_.valid() || !loop.ok()) return absl::InternalError("cannot set up the event loop (signalfd/epoll)");
    loop_ = *std::move(loop);
    loop_->Watch(signals_.get(), EPOLLIN, [this](uint32_t) { OnSignals(); });
    for (const auto& w : {stdio_.out, stdio_.err}) {
      loop_->Watch(w->wake_fd(), EPOLLIN, [this, w](uint32_t) {
        w->ClearWake();
        UpdateReading();
      });
    }
    absl::StatusOr<std::string> ssh = FindExecutable(launch_.ssh[0]);
    if (!ssh.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("--ssh-command ", launch_.ssh[0], ": ", ssh.status().message(),
                                                        "; install OpenSSH's client or name the remote shell"));
    }
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    SayStart();
    hosts_.resize(launch_.hosts.size());
    for (size_t i = 0; i < hosts_.size(); ++i) {
      Host& h = hosts_[i];
      h.index = static_cast<int>(i);
      h.name = launch_.hosts[i].name;
      absl::StatusOr<ChildProcess> child =
          ChildProcess::Spawn({*ssh, SshArgv(launch_, i), env, /*capture_output=*/true, /*pipe_stdin=*/true, {}});
      if (!child.ok()) {
        for (size_t j = i; j < hosts_.size(); ++j) hosts_[j].exited = true;  // never started
        return absl::Status(child.status().code(), absl::StrCat("host ", h.name, ": ", child.status().message()));
      }
      h.ssh = *std::move(child);
      h.control = std::move(h.ssh->stdin_fd());
      h.out.fd = std::move(h.ssh->stdout_fd());
      h.err.fd = std::move(h.ssh->stderr_fd());
      h.err.to_stderr = true;
      Send(h, absl::StrCat("token ", launch_.token, "\n"));
      for (Stream* s : {&h.out, &h.err}) {
        loop_->Watch(s->fd.get(), EPOLLIN, [this, &h, s](uint32_t) { OnOutput(h, *s); });
      }
    }
    return absl::OkStatus();
  }

  void SayStart() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < launch_.hosts.size() && i < 8; ++i) {
      const HostSlots& h = launch_.hosts[i];
      names.push_back(h.slots > 0 ? absl::StrCat(h.name, ":", h.slots) : h.name);
    }
    if (launch_.hosts.size() > names.size()) names.push_back("...");
    spdlog::info("starting the job on {} host{} over ssh ({}); rendezvous on {}, run id {}", launch_.hosts.size(),
                 launch_.hosts.size() == 1 ? "" : "s", absl::StrJoin(names, ", "), launch_.endpoint, launch_.run_id);
  }

  // A line on a host's stdin. The pipe holds 64 KiB and the lines are few and short: one that
  // does not fit means that dtrun stopped reading, and is dropped.
  void Send(Host& h, const std::string& line) {
    if (!h.control.valid()) return;
    ssize_t n;
    do {
      n = ::write(h.control.get(), line.data(), line.size());
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(line.size())) h.control.Reset();  // its end is gone, or it reads nothing
  }

  void OnSignals() {
    signalfd_siginfo info;
    while (::read(signals_.get(), &info, sizeof(info)) == sizeof(info)) {
      const int signo = static_cast<int>(info.ssi_signo);
      if (signo == SIGCHLD) {
        ReapChildren();
        continue;
      }
      if (interrupt_ == 0) {
        interrupt_ = signo;
        spdlog::warn("got {}; passing it to every host", SignalName(signo));
      } else {
        spdlog::warn("got {} again; passing it on (the hosts stop their workers harder)", SignalName(signo));
      }
      StopAll(signo);
    }
  }

  void StopAll(int signo) {
    for (Host& h : hosts_) Send(h, absl::StrCat("signal ", SignalName(signo), "\n"));
    if (!kill_at_) kill_at_ = Clock::now() + launch_.shutdown_timeout + kKillAfterShutdown;
  }

  void ReapChildren() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (Host& h : hosts_) {
        if (h.ssh && h.ssh->pid() == pid) OnHostExit(h, status);
      }
    }
  }

  void OnHostExit(Host& h, int status) {
    h.ssh->MarkExited(status);
    h.exited = true;
    h.control.Reset();
    h.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!all_exited_at_ && std::all_of(hosts_.begin(), hosts_.end(), [](const Host& x) { return x.exited; })) {
      all_exited_at_ = Clock::now();
    }
    if (h.code == 0 && !interrupt_ && !kill_at_ && !success_at_) success_at_ = Clock::now();
    if (h.code == 0 || interrupt_ != 0 || kill_at_) return;  // after a stop, ending is what was asked
    const auto running = std::count_if(hosts_.begin(), hosts_.end(), [](const Host& x) { return !x.exited; });
    if (running > 0 && running >= launch_.min_nodes) {  // an elastic job goes on without it
      spdlog::warn("host {}: dtrun exited with {} ({}); the job goes on with {} host{} (--nnodes {})", h.name, h.code,
                   ExitMeaning(h.code), running, running == 1 ? "" : "s", launch_.nnodes);
      return;
    }
    spdlog::error("host {}: dtrun exited with {} ({})", h.name, h.code, ExitMeaning(h.code));
    if (failure_code_ == 0) failure_code_ = h.code;
    if (running > 0 && !stop_others_at_) stop_others_at_ = Clock::now() + kGraceAfterHostLoss;
  }

  void OnOutput(Host& h, Stream& s) {
    char chunk[kMaxLine];
    ssize_t n;
    do {
      n = ::read(s.fd.get(), chunk, sizeof(chunk));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // the end: a last line without its newline is still a line
      if (!s.partial.empty()) Emit(h, s, std::exchange(s.partial, "") + "\n");
      if (s.to_stderr) Write(s, summaries_.Flush(h.index));
      loop_->Unwatch(s.fd.get());
      s.fd.Reset();
      return;
    }
    s.partial.append(chunk, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      Emit(h, s, s.partial.substr(start, nl + 1 - start));
    }
    s.partial.erase(0, start);
    if (s.partial.size() >= kMaxLine) Emit(h, s, std::exchange(s.partial, ""));
    UpdateReading();
  }

  // Lines from many hosts share this console: dtrun's own say which host they come from, and the
  // job's failure summary, which every host prints, is shown once.
  void Emit(const Host& h, const Stream& s, std::string line) {
    if (absl::StartsWith(line, "[dtrun] ")) line = absl::StrCat("[dtrun ", h.name, "] ", line.substr(8));
    if (s.to_stderr) {
      Write(s, summaries_.Feed(h.index, std::move(line)));
    } else {
      stdio_.out->Write(line);
    }
  }
  void Write(const Stream& s, std::vector<std::string> lines) {
    for (std::string& line : lines) (s.to_stderr ? stdio_.err : stdio_.out)->Write(line);
  }

  // A console that takes nothing stops the reading here, as it stops the workers' on each host.
  void UpdateReading() {
    const bool paused = stdio_.out->congested() || stdio_.err->congested();
    if (paused == paused_) return;
    paused_ = paused;
    for (Host& h : hosts_) {
      for (Stream* s : {&h.out, &h.err}) {
        if (s->fd.valid()) loop_->SetInterest(s->fd.get(), paused ? 0u : static_cast<uint32_t>(EPOLLIN));
      }
    }
  }

  std::optional<Clock::time_point> NextDeadline() const {
    std::optional<Clock::time_point> d;
    auto after = [](std::optional<Clock::time_point> t, Clock::duration d) -> std::optional<Clock::time_point> {
      if (!t) return std::nullopt;
      return *t + d;
    };
    for (const auto& t : {kill_at_, stop_others_at_, after(all_exited_at_, kOutputAfterExit),
                          kill_at_ ? std::nullopt : after(success_at_, kOthersAfterSuccess)}) {
      if (t && (!d || *t < *d)) d = t;
    }
    return d;
  }

  void OnTimers() {
    const Clock::time_point now = Clock::now();
    if (stop_others_at_ && now >= *stop_others_at_) {
      stop_others_at_.reset();
      spdlog::warn("too few hosts are left for --nnodes {}; stopping the others", launch_.nnodes);
      StopAll(SIGTERM);
    }
    if (success_at_ && !kill_at_ && now >= *success_at_ + kOthersAfterSuccess) {
      spdlog::warn("a host finished the job {} s ago and others have not ended; stopping them",
                   std::chrono::duration_cast<seconds>(kOthersAfterSuccess).count());
      StopAll(SIGTERM);
    }
    if (kill_at_ && now >= *kill_at_) {
      kill_at_ = now + kKillAfterShutdown;  // the SIGKILL below ends them; this only bounds the loop
      for (Host& h : hosts_) {
        if (!h.exited && h.ssh) {
          spdlog::warn("host {}: no end {} s after the stop; killing its ssh", h.name,
                       std::chrono::duration_cast<seconds>(launch_.shutdown_timeout + kKillAfterShutdown).count());
          h.ssh->SignalGroup(SIGKILL);
        }
      }
    }
  }

  bool Finished() const {
    if (!std::all_of(hosts_.begin(), hosts_.end(), [](const Host& h) { return h.exited; })) return false;
    if (all_exited_at_ && Clock::now() >= *all_exited_at_ + kOutputAfterExit) return true;
    return std::none_of(hosts_.begin(), hosts_.end(),
                        [](const Host& h) { return h.out.fd.valid() || h.err.fd.valid(); });
  }

  const SshLaunch& launch_;
  const StdioWriters& stdio_;
  std::unique_ptr<EventLoop> loop_;
  UniqueFd signals_;
  std::vector<Host> hosts_;
  SummaryDedup summaries_;
  int interrupt_ = 0;
  int failure_code_ = 0;
  bool paused_ = false;
  std::optional<Clock::time_point> kill_at_, stop_others_at_, all_exited_at_, success_at_;
};

}  // namespace

int RunSshLaunch(const SshLaunch& launch, const StdioWriters& stdio) { return SshLauncher(launch, stdio).Run(); }

}  // namespace dtrun
