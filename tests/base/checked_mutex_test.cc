// CheckedMutex keeps absl::Mutex's promise that an awaited condition is checked whenever the mutex
// is released, including when another thread releases it by starting to wait itself.
#include "base/checked_mutex.h"

#include <thread>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

// Two threads take turns, each waking the other only by starting to wait: no other release of the
// mutex comes between a condition becoming true and its waiter being needed. Whichever thread
// gets the mutex first, a wait that woke nobody would leave both waiting until the bound.
TEST(CheckedMutexTest, AThreadThatStartsToWaitWakesTheOthersWhoseConditionsHoldNow) {
  CheckedMutex mu;
  bool started = false, asked = false, answered = false;
  std::thread other([&] {
    CheckedMutexLock lock(&mu);
    started = true;
    mu.Await([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return asked; });
    answered = true;
  });
  bool saw_start = false, saw_answer = false;
  {
    CheckedMutexLock lock(&mu);
    saw_start =
        mu.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return started; }, std::chrono::seconds(60));
    asked = true;
    saw_answer =
        mu.AwaitWithTimeout([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return answered; }, std::chrono::seconds(60));
  }
  other.join();
  EXPECT_TRUE(saw_start) << "the other thread's wait did not wake this one";
  EXPECT_TRUE(saw_answer) << "this thread's wait did not wake the other one";
}

}  // namespace
}  // namespace dtrun
