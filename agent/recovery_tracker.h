// Follows one recovery from a failure to every local rank stepping again, for the event log and
// the console: failure noticed -> workers stopped -> next workers started -> state restored
// (where from, which step) -> each local rank's first step after it. Plain logic on the agent's
// clock; the agent feeds it events.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dtrun {

struct Recovery {
  using Ms = std::chrono::milliseconds;
  Ms stopped{0}, started{0}, restored{0}, stepping{0};  // each since the failure was noticed
  std::string source = "none";  // memory | buddy | peer | disk | none (the first local rank's report)
  int64_t restored_step = -1;
  int64_t step_before = -1;      // the furthest step this node's workers had reported
  // Never below 0: a script may count its heartbeats from 0 and its snapshots from 1, so the state
  // restored can be a step past the last heartbeat.
  int64_t lost_steps() const { return std::max<int64_t>(step_before - std::max<int64_t>(restored_step, 0), 0); }
};

class RecoveryTracker {
 public:
  using Clock = std::chrono::steady_clock;

  // A failure (here or elsewhere) stops the round. Only the first call of a recovery counts.
  void OnFailure(Clock::time_point at, int64_t step_before);
  void OnStopped(Clock::time_point at);
  void OnStarted(Clock::time_point at, int nproc_per_node);
  void OnRestored(int local_rank, const std::string& source, int64_t step, Clock::time_point at);
  // A heartbeat. Returns the recovery once every local rank stepped past what it restored.
  std::optional<Recovery> OnStep(int local_rank, int64_t step, Clock::time_point at);
  bool active() const { return failed_at_.has_value(); }
  // Every recovery completed so far, oldest first.
  const std::vector<Recovery>& completed() const { return completed_; }

 private:
  std::optional<Clock::time_point> failed_at_;
  Recovery r_;
  std::vector<int64_t> restored_;  // by local rank: the step restored (-2: not reported)
  std::vector<bool> stepped_;
  bool started_ = false;
  std::vector<Recovery> completed_;
};

// The line that ends a job's summary when it recovered at least once ("" when it never did):
// "recoveries on this node: 2 (memory 1, disk 1); 3 step(s) of work lost in all; every local rank
// stepping again 3.35 s after a failure (median), 3.84 s at most".
std::string FormatRecoveries(const std::vector<Recovery>& done);

}  // namespace dtrun
