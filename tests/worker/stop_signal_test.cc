#include "worker/stop_signal.h"

#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Counts the watcher's calls and on which thread they ran.
struct Calls {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
  std::thread::id on;

  void Add() {
    std::lock_guard<std::mutex> lock(mu);
    ++count;
    on = std::this_thread::get_id();
    cv.notify_all();
  }
  bool AwaitAtLeast(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return count >= n; });
  }
};

// The survivors of a failure are stopped with SIGTERM while blocked in a collective: the watcher's
// work runs on its own thread, and the handler still sets the flag the training loop reads.
TEST(StopSignalWatcherTest, EachStopSignalRunsTheCallbackOnTheWatchersThread) {
  InstallStopSignalHandlers();
  Calls calls;
  {
    StopSignalWatcher watcher([&] { calls.Add(); });
    ASSERT_EQ(::raise(SIGTERM), 0);
    ASSERT_TRUE(calls.AwaitAtLeast(1));
    EXPECT_NE(calls.on, std::this_thread::get_id());
    EXPECT_TRUE(StopRequested());
    EXPECT_EQ(StopSignal(), SIGTERM);
    ASSERT_EQ(::raise(SIGUSR1), 0);
    ASSERT_TRUE(calls.AwaitAtLeast(2));
    EXPECT_EQ(StopSignal(), SIGUSR1);
  }
  // Gone with its watcher: a signal now calls nobody, and a new watcher does not see it.
  ASSERT_EQ(::raise(SIGTERM), 0);
  Calls later;
  {
    StopSignalWatcher watcher([&] { later.Add(); });
  }
  EXPECT_EQ(calls.count, 2);
  EXPECT_EQ(later.count, 0);
}

}  // namespace
}  // namespace dtrun::worker
