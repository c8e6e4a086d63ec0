#pragma once

namespace dtrun::worker {

// The trainers' progress lines: printf-formatted, one line each, on rank 0's stdout only (every
// rank computes the same numbers), flushed at once so that a crash right after loses none of them.
class RankZeroLog {
 public:
  explicit RankZeroLog(int rank) : rank_(rank) {}

  void Print(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

 private:
  int rank_;
};

}  // namespace dtrun::worker
