#include "tests/support/poll.h"

#include <algorithm>
#include <thread>

namespace dtrun::testing {

bool PollUntil(const std::function<bool()>& ask, std::chrono::milliseconds timeout, std::chrono::milliseconds pause) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    if (ask()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
  }
}

}  // namespace dtrun::testing
