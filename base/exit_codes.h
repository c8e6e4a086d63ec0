// Exit codes with a meaning shared by workers and the agent.
#pragma once

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

}  // namespace dtrun
