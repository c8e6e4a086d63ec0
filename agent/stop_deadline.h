// When the agent sends SIGKILL to workers it asked to stop. Plain logic on the agent's clock.
//
// After a failure the workers get a short grace (SnapshotRecovery::StopGrace): the rank that is
// gone or frozen never exits by itself, so waiting out the whole --shutdown-timeout would only
// delay the restart. A worker that says it is writing its state into memory on its way out
// (`keeping`, worker/memory_snapshot.h) gets up to the shutdown timeout instead: how long that
// write takes depends on the state's size and on how busy the machine is, and a worker killed
// mid-write costs every step since the last periodic snapshot. Once no worker is keeping any
// more (each said `kept`, or exited), the grace's end holds again.
#pragma once

#include <algorithm>
#include <chrono>
#include <set>

namespace dtrun {

class StopDeadline {
 public:
  using Clock = std::chrono::steady_clock;

  // A stop began at `now`: SIGKILL after `grace`, or up to `ceiling` while a worker keeps its state.
  void Begin(Clock::time_point now, std::chrono::milliseconds grace, std::chrono::milliseconds ceiling) {
    began_ = now;
    grace_end_ = now + grace;
    ceiling_end_ = now + std::max(grace, ceiling);
  }
  // The worker of `local_rank` is writing its state (also before a stop: it was unwinding from a
  // failed collective) or is done with it (kept, or exited).
  void Keeping(int local_rank) { keeping_.insert(local_rank); }
  void Done(int local_rank) { keeping_.erase(local_rank); }
  // The round's workers are gone: nothing is kept or stopping any more.
  void Reset() { *this = StopDeadline(); }

  Clock::time_point deadline() const { return keeping_.empty() ? grace_end_ : ceiling_end_; }
  bool keeping() const { return !keeping_.empty(); }
  // For the SIGKILL line: how long the workers were given.
  std::chrono::milliseconds waited(Clock::time_point now) const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(now - began_);
  }

 private:
  Clock::time_point began_{}, grace_end_{}, ceiling_end_{};
  std::set<int> keeping_;
};

}  // namespace dtrun
