// Exit codes with a meaning shared by workers and the agent.
#pragma once

namespace dtrun {

// A worker's collective (all-reduce, broadcast, barrier) exceeded its timeout: the worker library's
// watchdog ended the process so the agent can restart the job instead of waiting forever.
inline constexpr int kCollectiveTimeoutExitCode = 75;

}  // namespace dtrun
