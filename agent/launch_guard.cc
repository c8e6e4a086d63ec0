#include "agent/launch_guard.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "base/env_names.h"
#include "base/process_table.h"

namespace dtrun {
namespace {

// The guard is forked, not exec'd: without this it would hold every descriptor dtrun had, and a
// pipe end it holds keeps the other end from seeing its end (the stdin pipe of a dtrun that dtrun
// -H started: its workers would never see the end of their input).
void CloseInheritedFds(int keep) {
  const unsigned k = static_cast<unsigned>(keep);
  bool closed = (k <= 3 || ::syscall(SYS_close_range, 3u, k - 1, 0u) == 0) &&
                ::syscall(SYS_close_range, std::max(k + 1, 3u), ~0u, 0u) == 0;
  if (closed) return;
  // Kernels before 5.9 have no close_range: the open ones are listed in /proc.
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  std::vector<int> open_fds;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd >= 3 && fd != keep && fd != ::dirfd(dir)) open_fds.push_back(fd);
  }
  ::closedir(dir);
  for (int fd : open_fds) ::close(fd);
}

[[noreturn]] void GuardMain(int from_agent, const std::string& launch_id,
                            const std::string& registry_file) {
  CloseInheritedFds(from_agent);
  ::setpgid(0, 0);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(devnull, STDIN_FILENO);
  ::dup2(devnull, STDOUT_FILENO);
  char byte = 0;
  ssize_t n;
  do {
    n = ::read(from_agent, &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n == 1) ::_exit(0);  // dismissed: the agent cleaned up
  // EOF: the agent died without dismissing us. Its workers got SIGKILL from their parent-death
  // signal; their descendants did not.
  // A process caught mid-fork or mid-exec by the first look can leave a child the look missed: look
  // again until a look finds nothing (bounded).
  int killed = 0;
  for (int look = 0; look < 5; ++look) {
    std::vector<ProcessEntry> left = FindProcessesWithEnv(env::kLaunchId, launch_id);
    if (left.empty()) break;
    killed += TerminateProcesses(left, SIGKILL, std::chrono::milliseconds(200));
  }
  if (!registry_file.empty()) ::unlink(registry_file.c_str());
  if (killed > 0) {
    std::fprintf(stderr, "[dtrun] the launcher died; ended %d process(es) it had started\n", killed);
  }
  ::_exit(0);
}

}  // namespace

LaunchGuard LaunchGuard::Start(const std::string& launch_id, const std::string& registry_file) {
  LaunchGuard guard;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return guard;  // no guard; the agent still cleans up itself
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    GuardMain(fds[0], launch_id, registry_file);
  }
  ::close(fds[0]);
  guard.to_guard_ = UniqueFd(fds[1]);
  guard.pid_ = pid;
  if (pid < 0) guard.to_guard_.Reset();
  return guard;
}

void LaunchGuard::Dismiss() {
  if (!to_guard_.valid()) return;
  char byte = 'D';
  ssize_t ignored = ::write(to_guard_.get(), &byte, 1);
  (void)ignored;
  to_guard_.Reset();
}

}  // namespace dtrun
