// Turns a collective that hangs (a peer died, a link is cut, NCCL/Gloo stuck) into a clean exit
// with kCollectiveTimeoutExitCode, which the agent reports as a hang and restarts. Arm before
// waiting on a collective, Disarm after; a thread waits on the deadline (no polling).
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "base/checked_mutex.h"

namespace dtrun::worker {

class CollectiveWatchdog {
 public:
  explicit CollectiveWatchdog(std::chrono::milliseconds timeout, int rank);
  ~CollectiveWatchdog();

  void Arm(const char* what);
  void Disarm();

  // RAII: armed for the lifetime of the scope.
  class Scope {
   public:
    Scope(CollectiveWatchdog* w, const char* what) : w_(w) {
      if (w_) w_->Arm(what);
    }
    ~Scope() {
      if (w_) w_->Disarm();
    }

   private:
    CollectiveWatchdog* w_;
  };

 private:
  void Watch();
  bool Changed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || generation_ != seen_; }

  const std::chrono::milliseconds timeout_;
  const int rank_;
  CheckedMutex mu_;
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seen_ ABSL_GUARDED_BY(mu_) = 0;
  const char* what_ ABSL_GUARDED_BY(mu_) = "";
  std::thread thread_;
};

}  // namespace dtrun::worker
