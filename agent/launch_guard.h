// The launch guard: a tiny process forked before any thread exists, in its own process group.
// It waits for the agent to go away. If the agent ends normally it says so first and the guard
// exits; if the agent is killed (kill -9, OOM killer), the guard ends every process that carries
// this launch's marker — workers and their descendants, wherever they were re-parented — and
// removes the launch's registry entry. A parent-death signal alone reaches direct children only.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/unique_fd.h"

namespace dtrun {

class LaunchGuard {
 public:
  // Forks the guard. Must be called while the process is single-threaded.
  static LaunchGuard Start(const std::string& launch_id, const std::string& registry_file);
  LaunchGuard(LaunchGuard&&) = default;
  LaunchGuard& operator=(LaunchGuard&&) = default;

  // Tells the guard the agent cleaned up itself; it exits without scanning.
  void Dismiss();
  pid_t pid() const { return pid_; }

 private:
  LaunchGuard() = default;
  UniqueFd to_guard_;
  pid_t pid_ = -1;
};

}  // namespace dtrun
