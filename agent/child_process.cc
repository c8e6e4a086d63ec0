#include "agent/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun {
namespace {

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const std::string& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// What the child reports through the error pipe when it cannot become the worker.
struct ChildFailure {
  int step;  // kExecStep or kBindStep
  int err;
};
constexpr int kExecStep = 0;
constexpr int kBindStep = 1;

// A CPU set built before fork: the child may not allocate.
class CpuMask {
 public:
  explicit CpuMask(const std::vector<int>& cpus) {
    if (cpus.empty()) return;
    const int count = *std::max_element(cpus.begin(), cpus.end()) + 1;
    set_ = CPU_ALLOC(count);
    if (set_ == nullptr) return;
    bytes_ = CPU_ALLOC_SIZE(count);
    CPU_ZERO_S(bytes_, set_);
    for (int cpu : cpus) CPU_SET_S(cpu, bytes_, set_);
  }
  ~CpuMask() {
    if (set_ != nullptr) CPU_FREE(set_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;
  // In the child: async-signal-safe (one system call).
  bool ApplyToSelf() const { return set_ == nullptr || ::sched_setaffinity(0, bytes_, set_) == 0; }

 private:
  cpu_set_t* set_ = nullptr;
  size_t bytes_ = 0;
};

[[noreturn]] void ReportAndExit(int errpipe, int step) {
  const ChildFailure failure{step, errno};
  ssize_t ignored = ::write(errpipe, &failure, sizeof(failure));
  (void)ignored;
  ::_exit(127);
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const SpawnRequest& req, const CpuMask& cpus, char* const* argv, char* const* envp,
                            int in_fd, int out_fd, int err_fd, int errpipe, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the agent died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
  if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
  if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
  for (int fd : req.inherit_fds) ::fcntl(fd, F_SETFD, 0);
  if (!cpus.ApplyToSelf()) ReportAndExit(errpipe, kBindStep);
  ::execve(req.executable.c_str(), argv, envp);
  ReportAndExit(errpipe, kExecStep);
}

}  // namespace

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const SpawnRequest& req) {
  std::optional<Pipe> out, err;
  if (req.capture_output) {
    DT_ASSIGN_OR_RETURN(out, MakePipe(/*nonblocking_read=*/true));
    DT_ASSIGN_OR_RETURN(err, MakePipe(/*nonblocking_read=*/true));
  }
  std::optional<Pipe> in;
  if (req.pipe_stdin) {
    DT_ASSIGN_OR_RETURN(Pipe i, MakePipe(/*nonblocking_read=*/false));
    ::fcntl(i.write.get(), F_SETFL, ::fcntl(i.write.get(), F_GETFL) | O_NONBLOCK);
    in = std::move(i);
  }
  DT_ASSIGN_OR_RETURN(Pipe exec_errors, MakePipe(/*nonblocking_read=*/false));

  std::vector<char*> argv = CStrings(req.argv);
  std::vector<char*> envp = CStrings(req.env);
  const CpuMask cpus(req.cpus);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ExecChild(req, cpus, argv.data(), envp.data(), in ? in->read.get() : -1, out ? out->write.get() : -1,
              err ? err->write.get() : -1, exec_errors.write.get(), parent);
  }
  // Also set the group from the parent, so signals sent right after Spawn reach it.
  ::setpgid(pid, pid);
  exec_errors.write.Reset();

  ChildProcess child;
  child.pid_ = pid;
  if (out) child.stdout_ = std::move(out->read);
  if (err) child.stderr_ = std::move(err->read);
  if (in) child.stdin_ = std::move(in->write);

  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(exec_errors.read.get(), &failure, sizeof(failure));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(failure)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    child.exited_ = true;
    if (failure.step == kBindStep) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot bind a worker to its CPUs (--numa-binding): ", strerror(failure.err)));
    }
    return absl::FailedPreconditionError(absl::StrCat("cannot execute ", req.executable, ": ", strerror(failure.err)));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this == &other) return *this;
  KillAndReap();
  pid_ = std::exchange(other.pid_, -1);
  exited_ = other.exited_;
  status_ = other.status_;
  stdout_ = std::move(other.stdout_);
  stderr_ = std::move(other.stderr_);
  stdin_ = std::move(other.stdin_);
  return *this;
}

ChildProcess::~ChildProcess() { KillAndReap(); }

void ChildProcess::KillAndReap() {
  if (!running()) return;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exited_ = true;
}

bool ChildProcess::SignalGroup(int signo) const {
  if (!running()) return false;
  return ::kill(-pid_, signo) == 0 || ::kill(pid_, signo) == 0;
}

void ChildProcess::MarkExited(int wait_status) {
  exited_ = true;
  status_ = wait_status;
}


}  // namespace dtrun
