#include "worker/collective_watchdog.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/exit_codes.h"
#include "worker/error_record.h"

namespace dtrun::worker {

CollectiveWatchdog::CollectiveWatchdog(std::chrono::milliseconds timeout, int rank)
    : timeout_(timeout), rank_(rank), thread_([this] { Watch(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    CheckedMutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void CollectiveWatchdog::Arm(const char* what) {
  CheckedMutexLock lock(&mu_);
  armed_ = true;
  what_ = what;
  ++generation_;
}

void CollectiveWatchdog::Disarm() {
  CheckedMutexLock lock(&mu_);
  armed_ = false;
  ++generation_;
}

void CollectiveWatchdog::Watch() {
  CheckedMutexLock lock(&mu_);
  for (;;) {
    seen_ = generation_;
    if (stopping_) return;
    if (!armed_) {
      mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Changed(); });
      continue;
    }
    // Armed: wait for a change or the deadline.
    if (mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Changed(); }, timeout_)) continue;
    // Said in the error file too: the summary then has what hung, and the rank's record is later
    // than the failure of the peer it waited for.
    ReportFatalError(absl::StrCat("rank ", rank_),
                     absl::StrFormat("%s did not complete within %.0f s (a peer lost or stuck); exiting with code %d "
                                     "(collective timeout)",
                                     what_, timeout_.count() / 1000.0, kCollectiveTimeoutExitCode));
    std::fflush(stderr);
    ::_exit(kCollectiveTimeoutExitCode);
  }
}

}  // namespace dtrun::worker
