// A move-only handle that owns one spawned worker: its PID, its own process group and the read
// ends of its stdout/stderr pipes. The child gets PR_SET_PDEATHSIG=SIGKILL, an unblocked signal
// mask and default dispositions. Destroying a still-running child kills its group and reaps it.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace dtrun {

struct SpawnRequest {
  std::string executable;          // absolute path (base/executable.h resolves names)
  std::vector<std::string> argv;   // argv[0] included
  std::vector<std::string> env;    // "NAME=value" entries, the child's whole environment
  bool capture_output = true;      // false: the child inherits our stdout/stderr
  bool pipe_stdin = false;         // true: the child reads a pipe we write (stdin_fd); else ours
  std::vector<int> inherit_fds;    // our close-on-exec fds the child keeps, under the same numbers
  std::vector<int> cpus;           // the CPUs it may run on (sched_setaffinity); empty: ours
};

class ChildProcess {
 public:
  // Forks and execs. Errors: FailedPrecondition if exec or the CPU binding fails (the child's
  // errno is reported), ResourceExhausted if fork/pipe fail.
  static absl::StatusOr<ChildProcess> Spawn(const SpawnRequest& request);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exited_; }
  // The read ends of the output pipes (invalid when not captured or already closed).
  UniqueFd& stdout_fd() { return stdout_; }
  UniqueFd& stderr_fd() { return stderr_; }
  // The write end of the child's stdin pipe (non-blocking; invalid unless requested).
  UniqueFd& stdin_fd() { return stdin_; }

  // Signals the child's whole process group. Returns false if it is already gone.
  bool SignalGroup(int signo) const;
  // Records the wait status reaped by the caller (the agent reaps with waitpid(-1)).
  void MarkExited(int wait_status);
  std::optional<int> wait_status() const { return exited_ ? std::optional<int>(status_) : std::nullopt; }

 private:
  ChildProcess() = default;
  void KillAndReap();

  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  UniqueFd stdout_;
  UniqueFd stderr_;
  UniqueFd stdin_;
};


}  // namespace dtrun
