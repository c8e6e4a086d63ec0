#include "launcher/ssh_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/child_process.h"
#include "agent/console.h"
#include "agent/stdin_router.h"
#include "base/event_loop.h"
#include "base/executable.h"
#include "base/file_feed.h"
#include "base/outbox.h"
#include "base/signal_names.h"
#include "base/unique_fd.h"
#include "launcher/control_stdin.h"
#include "launcher/host_output.h"
#include "launcher/ssh_launch_registry.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace dtrun {
namespace {

using Clock = EventLoop::Clock;
using std::chrono::seconds;

constexpr size_t kMaxRead = 64 * 1024;
// Control lines a host's ssh has not taken yet, beyond which no more input is read for it: the
// input waits in its pipe from the StdinRouter, and the router stops reading dtrun's stdin.
constexpr size_t kMaxUnsentControl = 64 * 1024;
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
  bool to_stderr = false;
};

struct Host {
  int index = 0;
  std::string name;
  std::optional<ChildProcess> ssh;
  UniqueFd control;    // the ssh's stdin (non-blocking)
  Outbox unsent;       // control lines the ssh has not taken yet
  UniqueFd input;      // what the StdinRouter sends this host (read end of its pipe)
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
    if (const int dropped = output_ ? output_->dropped_summaries() : 0; dropped > 0) {
      spdlog::info("({} other host{} printed the same failure summary)", dropped, dropped == 1 ? "" : "s");
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
    std::vector<std::string> names;
    for (const HostSlots& host : launch_.hosts) names.push_back(host.name);
    output_ = std::make_unique<HostOutput>(std::move(names), Consoles::ForStdio(stdio_));
    // dtrun's stdin goes to the hosts' workers as a terminal's goes to local ones (a prompting rank
    // gets the next line, else the last one that did, at first the first host's).
    // A file on stdin (`< answers.txt`) is routed as piped input is, through a pipe of its own.
    if (IsRegularFile(STDIN_FILENO)) {
      absl::StatusOr<std::unique_ptr<FileFeed>> feed = FileFeed::Start(STDIN_FILENO);
      if (!feed.ok()) return feed.status();
      stdin_file_ = *std::move(feed);
    }
    input_ = std::make_unique<StdinRouter>(stdin_file_ ? stdin_file_->fd() : STDIN_FILENO, *loop_);
    const bool routed = input_->mode() == StdinRouter::Mode::kRouted;
    const bool terminal = routed && ::isatty(STDIN_FILENO) == 1;
    std::map<int, UniqueFd> inputs;
    hosts_.resize(launch_.hosts.size());
    for (size_t i = 0; i < hosts_.size(); ++i) {
      Host& h = hosts_[i];
      h.index = static_cast<int>(i);
      h.name = launch_.hosts[i].name;
      absl::StatusOr<ChildProcess> child =
          ChildProcess::Spawn({*ssh, SshArgv(launch_, i), env, /*capture_output=*/true, /*pipe_stdin=*/true, {}, {}});
      if (!child.ok()) {
        for (size_t j = i; j < hosts_.size(); ++j) hosts_[j].exited = true;  // never started
        return absl::Status(child.status().code(), absl::StrCat("host ", h.name, ": ", child.status().message()));
      }
      h.ssh = *std::move(child);
      h.control = std::move(h.ssh->stdin_fd());
      h.out.fd = std::move(h.ssh->stdout_fd());
      h.err.fd = std::move(h.ssh->stderr_fd());
      h.err.to_stderr = true;
      ::fcntl(h.control.get(), F_SETFL, ::fcntl(h.control.get(), F_GETFL) | O_NONBLOCK);  // the loop never blocks
      loop_->Watch(h.control.get(), 0, [this, &h](uint32_t events) { OnControlWritable(h, events); });
      if (terminal) Send(h, "stdin terminal\n");
      Send(h, absl::StrCat("token ", launch_.token, "\n"));
      if (absl::StatusOr<Pipe> pipe = routed ? MakePipe(/*nonblocking_read=*/true) : absl::StatusOr<Pipe>();
          pipe.ok()) {
        h.input = std::move(pipe->read);
        inputs[h.index] = std::move(pipe->write);
        loop_->Watch(h.input.get(), EPOLLIN, [this, &h](uint32_t) { OnInput(h); });
      } else {
        Send(h, "input-end\n");  // /dev/null or closed: the workers' stdin ends, as their own would
      }
      for (Stream* s : {&h.out, &h.err}) {
        loop_->Watch(s->fd.get(), EPOLLIN, [this, &h, s](uint32_t) { OnOutput(h, *s); });
      }
    }
    input_->SetWorkers(std::move(inputs));
    return absl::OkStatus();
  }

  void SayStart() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < launch_.hosts.size() && i < 8; ++i) {
      names.push_back(launch_.hosts[i].spec());
    }
    if (launch_.hosts.size() > names.size()) names.push_back("...");
    spdlog::info("starting the job on {} host{} over ssh ({}); rendezvous on {}, run id {}", launch_.hosts.size(),
                 launch_.hosts.size() == 1 ? "" : "s", absl::StrJoin(names, ", "), launch_.endpoint, launch_.run_id);
  }

  // A line on a host's stdin, written as its ssh takes it.
  void Send(Host& h, absl::string_view line) {
    if (!h.control.valid()) return;
    h.unsent.Append(line);
    FlushControl(h);
  }
  void FlushControl(Host& h) {
    if (!h.control.valid()) return;
    if (!h.unsent.WriteTo(h.control.get())) {  // its ssh is gone
      CloseControl(h);
      return;
    }
    loop_->SetInterest(h.control.get(), h.unsent.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
    if (h.input.valid()) {
      loop_->SetInterest(h.input.get(), h.unsent.size() < kMaxUnsentControl ? static_cast<uint32_t>(EPOLLIN) : 0u);
    }
  }
  void OnControlWritable(Host& h, uint32_t events) {
    if (!h.unsent.empty()) {
      FlushControl(h);
    } else if (events & (EPOLLERR | EPOLLHUP)) {
      CloseControl(h);
    }
  }
  void CloseControl(Host& h) {
    for (UniqueFd* fd : {&h.control, &h.input}) {
      if (!fd->valid()) continue;
      loop_->Unwatch(fd->get());
      fd->Reset();  // the router's writes to this host then fail, and it drops them
    }
    h.unsent.Clear();
  }

  // Input the router sends this host, passed on in "input" lines.
  void OnInput(Host& h) {
    char chunk[kMaxInputChunk];
    ssize_t n;
    do {
      n = ::read(h.input.get(), chunk, sizeof(chunk));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n > 0) {
      Send(h, InputLine(absl::string_view(chunk, static_cast<size_t>(n))));
      return;
    }
    loop_->Unwatch(h.input.get());  // the router ended this host's input (dtrun's stdin ended)
    h.input.Reset();
    Send(h, "input-end\n");
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
    CloseControl(h);
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
    char chunk[kMaxRead];
    ssize_t n;
    do {
      n = ::read(s.fd.get(), chunk, sizeof(chunk));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {
      output_->End(h.index, s.to_stderr);
      loop_->Unwatch(s.fd.get());
      s.fd.Reset();
      return;
    }
    output_->Write(h.index, s.to_stderr, absl::string_view(chunk, static_cast<size_t>(n)), Clock::now());
    UpdateReading();
  }

  // A console that takes nothing stops the reading here, as it stops the workers' on each host.
  void UpdateReading() {
    const bool paused = stdio_.out->congested() || stdio_.err->congested();
    if (paused == paused_) return;
    paused_ = paused;
    if (!paused) output_->ReadingResumed(Clock::now());
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
    // A partial line is due once its host went quiet; not while dtrun is not reading the hosts.
    const std::optional<Clock::time_point> quiet = paused_ || !output_ ? std::nullopt : output_->quiet_deadline();
    for (const auto& t : {kill_at_, stop_others_at_, after(all_exited_at_, kOutputAfterExit),
                          kill_at_ ? std::nullopt : after(success_at_, kOthersAfterSuccess), quiet}) {
      if (t && (!d || *t < *d)) d = t;
    }
    return d;
  }

  void OnTimers() {
    const Clock::time_point now = Clock::now();
    if (output_ && !paused_) {
      for (int host : output_->ShowQuiet(now)) input_->OnPrompt(host);
    }
    if (input_ && input_->TakeEchoedLine()) output_->ForgetOpenLines();
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
  std::unique_ptr<HostOutput> output_;
  std::unique_ptr<FileFeed> stdin_file_;  // read by input_, so destroyed after it
  std::unique_ptr<StdinRouter> input_;    // on loop_, so destroyed first
  UniqueFd signals_;
  std::vector<Host> hosts_;
  int interrupt_ = 0;
  int failure_code_ = 0;
  bool paused_ = false;
  std::optional<Clock::time_point> kill_at_, stop_others_at_, all_exited_at_, success_at_;
};

}  // namespace

int RunSshLaunch(const SshLaunch& launch, const std::string& command_line, const StdioWriters& stdio) {
  SshLaunchRegistration registration(launch, command_line);
  return SshLauncher(launch, stdio).Run();
}

}  // namespace dtrun
