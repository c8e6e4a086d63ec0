// Exit codes with a meaning shared by workers, the agent and dtrun's commands.
#pragma once

#include "absl/status/status.h"

namespace dtrun {

// A worker's collective (all-reduce, broadcast, barrier) exceeded its timeout: the worker library's
// watchdog ended the process so the agent can restart the job instead of waiting forever.
inline constexpr int kCollectiveTimeoutExitCode = 75;

// The agent declared a worker hung (no progress report, or a section open, past its timeout; or
// stuck in uninterruptible sleep) and stopped it after collecting every worker's stacks.
inline constexpr int kHangExitCode = 76;

// Restarts stopped making progress: --max-attempts-without-progress attempts in a row ended
// without passing the best step reached before them, so the job ended instead of restarting.
inline constexpr int kNoProgressExitCode = 77;

// A command that could not do its work (every subcommand) exits with
// 2 when it cannot run as given (a flag, a directory, an address, the gRPC module:
// InvalidArgument, FailedPrecondition, PermissionDenied), as for a command line that does not
// parse; 1 when something it needs did not answer or was taken (a port, a host, the service).
inline int ExitCodeFor(const absl::Status& why) {
  switch (why.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
      return 2;
    default:
      return 1;
  }
}

}  // namespace dtrun
