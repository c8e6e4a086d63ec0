#include "worker/rank_zero_log.h"

#include <cstdarg>
#include <cstdio>

namespace dtrun::worker {

void RankZeroLog::Print(const char* fmt, ...) const {
  if (rank_ != 0) return;
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace dtrun::worker
