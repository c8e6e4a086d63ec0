// A trainer's stop request: SIGTERM, and Slurm's warning before preemption (sbatch
// --signal=USR1@120, forwarded by dtrun), SIGUSR1/SIGUSR2. The handler only sets flags and writes
// a byte to a pipe; the training loop all-reduces the flag each step, checkpoints and exits with
// 128 + the signal.
//
// The pipe is for work that cannot wait for the step's end: dtrun sends SIGTERM to the ranks that
// survive a failure, which are then usually blocked in a collective with the rank that is gone,
// and a thread keeps their state in memory while they still can (StopSignalWatcher).
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace dtrun::worker {

void InstallStopSignalHandlers();
bool StopRequested();
int StopSignal();  // the last stop signal received (SIGTERM before any)

// Runs `on_stop` on a thread of its own after each stop signal (several signals in a row may give
// one call). The handlers must be installed for signals to arrive here. At most one watcher at a
// time per process.
class StopSignalWatcher {
 public:
  explicit StopSignalWatcher(std::function<void()> on_stop);
  ~StopSignalWatcher();  // joins the thread; an `on_stop` running is waited for
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

 private:
  void Run();
  std::function<void()> on_stop_;
  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace dtrun::worker
