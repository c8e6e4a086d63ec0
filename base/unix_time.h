// Wall-clock time as the records dtrun writes carry it (event log, failures, status rows).
#pragma once

#include <chrono>
#include <cstdint>

namespace dtrun {

inline int64_t UnixMillisNow() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace dtrun
