// The stopwatch behind the all-reduce wait reports (worker/sync_stopwatch.h), on the CPU: each lap
// is known at its Stop, with the time since the lap before; the CUDA half runs only on a GPU
// (scripts/gpu-check.sh).
#include "worker/sync_stopwatch.h"

#include <chrono>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Busy for at least `d` by the steady clock (no sleep: the bound is what is measured).
void Spin(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

TEST(SyncStopwatchTest, OnTheCpuEachLapIsKnownAtItsStopWithTheStepSinceTheLast) {
  SyncStopwatch watch(/*cuda=*/false);
  EXPECT_FALSE(watch.newest().has_value());
  watch.Start();
  Spin(std::chrono::microseconds(2000));
  watch.Stop();
  ASSERT_TRUE(watch.newest().has_value());
  EXPECT_EQ(watch.newest()->steps_ago, 0);
  EXPECT_GE(watch.newest()->wait_s, 0.002);
  EXPECT_EQ(watch.newest()->step_s, 0) << "no lap before the first";

  Spin(std::chrono::microseconds(3000));  // the next step's forward and backward
  watch.Start();
  watch.Stop();
  ASSERT_TRUE(watch.newest().has_value());
  EXPECT_LT(watch.newest()->wait_s, watch.newest()->step_s);
  EXPECT_GE(watch.newest()->step_s, 0.003);
}

}  // namespace
}  // namespace dtrun::worker
