// Abseil's mutex deadlock detector, switched off in our binaries. Debian builds Abseil without
// NDEBUG, which leaves the detector on: every absl::Mutex, gRPC's included, adds to a global
// lock-order graph on each acquisition. In the rendezvous load generator that graph was the largest
// cost in the profile. Lock order in our own code is checked by the TSan build instead.
#pragma once

#include "absl/synchronization/mutex.h"

namespace dtrun {

inline void SkipMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace dtrun
