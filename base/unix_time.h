// Wall-clock time as the records dtrun writes carry it (event log, failures, status rows).
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace dtrun {

inline int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The time by the clock a file's modification time is taken from (the kernel's coarse real-time
// clock, up to a tick behind the precise one), for a time compared with files' times: a file
// written after this call never reads as older than it.
inline int64_t UnixMillisNowAsFilesSeeIt() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace dtrun
