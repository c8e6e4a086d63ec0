// Collects the stacks of a round's workers into files before they are stopped, without blocking
// the agent's loop. A worker that announced a stack signal (the Python module registers
// faulthandler for it, writing to its DTRUN_STACKS_FILE) is sent that signal and writes its own
// file; the others are read from outside by eu-stack, else gdb, when one is installed (a file
// then says which to install). Collection is bounded by a deadline; tools still running then are
// killed. Not thread-safe: the agent's loop drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dtrun {

// Whether the stacks in `file` wait inside a collective (torch.distributed, c10d, gloo or NCCL
// frames, Python or native). nullopt: no stacks there. Reads at most 1 MiB.
std::optional<bool> WaitsInCollective(const std::string& file);

class StackDumper {
 public:
  using Clock = std::chrono::steady_clock;
  struct Target {
    int local_rank = 0;
    pid_t pid = 0;
    int stack_signal = 0;  // 0: read from outside
    std::string file;      // where this worker's stacks go
    off_t size_before = 0;  // set by Start
  };

  // Begins collecting. `tool`: eu-stack or gdb's path ("" if neither is installed).
  void Start(std::vector<Target> targets, const std::string& tool, Clock::time_point now);
  // A reaped child: true if it was one of the tools.
  bool OnExit(pid_t pid);
  bool active() const { return active_; }
  // Every tool has exited and every signalled worker has written, or the deadline passed.
  bool Finished(Clock::time_point now) const;
  // When to look again while active: soon (a signalled worker writes within milliseconds and
  // tells nobody) but never past the deadline.
  Clock::time_point next_check(Clock::time_point now) const;
  // Ends the collection: tools still running are killed. Returns the files written.
  std::vector<std::string> Finish();

  // eu-stack or gdb from PATH, or "" when neither is installed.
  static std::string FindTool();

 private:
  bool active_ = false;
  Clock::time_point deadline_;
  std::vector<Target> targets_;
  std::vector<pid_t> tools_;  // running
};

}  // namespace dtrun
