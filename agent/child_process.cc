#include "agent/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const SpawnRequest& req, char* const* argv, char* const* envp,
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
  ::execve(req.executable.c_str(), argv, envp);
  int err = errno;
  ssize_t ignored = ::write(errpipe, &err, sizeof(err));
  (void)ignored;
  ::_exit(127);
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
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("fork: ", strerror(errno)));
  if (pid == 0) {
    ExecChild(req, argv.data(), envp.data(), in ? in->read.get() : -1, out ? out->write.get() : -1,
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

  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(exec_errors.read.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(child_errno)) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    child.exited_ = true;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", req.executable, ": ", strerror(child_errno)));
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
