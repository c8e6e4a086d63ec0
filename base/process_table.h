// Finds processes by the launch marker in their initial environment (/proc/PID/environ) and
// ends them. Used by the agent (stray descendants), the launch guard and `dtrun kill`.
// Only processes of the calling user are visible/ signalled. Thread-compatible.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun {

struct ProcessEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  pid_t pgid = 0;                      // its process group
  unsigned long long start_ticks = 0;  // field 22 of /proc/PID/stat: identity against PID reuse
  std::map<std::string, std::string> env;  // only the variables asked for
  std::string cmdline;                    // argv joined by spaces
};

// Reads one process; NotFound if it is gone or not ours to read.
absl::StatusOr<ProcessEntry> ReadProcess(pid_t pid, const std::vector<std::string>& env_names);

// All processes (except the caller) whose environment defines `marker_name`, and, if
// `marker_value` is set, defines it to that value. `env_names` are also captured.
std::vector<ProcessEntry> FindProcessesWithEnv(const std::string& marker_name,
                                               const std::optional<std::string>& marker_value,
                                               std::vector<std::string> env_names = {});

// Direct children of `parent` (from /proc/*/stat), environment not read.
std::vector<ProcessEntry> ChildrenOf(pid_t parent);

// The threads of `pid` in uninterruptible sleep (D state), each with its context-switch count
// (voluntary + involuntary, /proc/PID/task/TID/status): a thread whose count has not moved between
// two looks has not run in between, which tells a stuck thread from one doing many short waits.
// Empty if none (or the process is gone).
std::map<pid_t, uint64_t> ThreadsInUninterruptibleSleep(pid_t pid);

// The first line of /proc/PID/<name> (e.g. "wchan"), at most 256 bytes; "" if unreadable.
std::string ReadProcFile(pid_t pid, const std::string& name);

// How long the calling thread has waited, runnable, for a CPU since it started
// (/proc/thread-self/schedstat); nullopt where the kernel does not keep it.
std::optional<std::chrono::nanoseconds> ThisThreadRunqueueWait();

// CPU time used (user + system, in clock ticks: sysconf(_SC_CLK_TCK) per second) and resident
// memory of one process, from /proc/PID/stat. NotFound if it is gone.
struct ProcessUsage {
  uint64_t cpu_ticks = 0;
  int64_t rss_bytes = 0;
};
absl::StatusOr<ProcessUsage> ReadProcessUsage(pid_t pid);

// Start time of `pid` in clock ticks since boot; NotFound if it does not exist.
absl::StatusOr<unsigned long long> ProcessStartTicks(pid_t pid);

// Sends `signo` to each process, waits (pidfd + poll, no sleep loop) up to `grace` for them to
// exit, then SIGKILLs the survivors and waits for them too (bounded). A process whose start time no
// longer matches (PID reused) is left alone. Returns how many processes were signalled.
// Does not reap: the caller reaps its own children.
int TerminateProcesses(const std::vector<ProcessEntry>& procs, int signo,
                       std::chrono::milliseconds grace);

}  // namespace dtrun
