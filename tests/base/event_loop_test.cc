// The event loop (base/event_loop.h) over real pipes, with an injected clock for its deadlines.
#include "base/event_loop.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

using Clock = EventLoop::Clock;

class EventLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = *EventLoop::Create([this] { return now_; });
    for (Pipe& p : pipes_) p = *MakePipe(/*nonblocking_read=*/true);
  }
  void Send(int i) { ASSERT_TRUE(WriteAll(pipes_[i].write.get(), "x", 1)); }
  int ReadFd(int i) const { return pipes_[i].read.get(); }
  // A wait that returns at once: the injected clock already stands at the deadline.
  int Poll() { return loop_->RunOnce(now_); }

  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<EventLoop> loop_;
  Pipe pipes_[3];
};

TEST_F(EventLoopTest, OnlyTheReadyFdsHandlersRunWithWhatTheyAreReadyFor) {
  std::vector<std::pair<int, uint32_t>> calls;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(loop_->Watch(ReadFd(i), EPOLLIN, [&calls, i](uint32_t ev) { calls.emplace_back(i, ev); }));
  }
  EXPECT_EQ(Poll(), 0);
  Send(1);
  EXPECT_EQ(Poll(), 1);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].first, 1);
  EXPECT_TRUE(calls[0].second & EPOLLIN);
}

TEST_F(EventLoopTest, ADeadlineInThePastReturnsAtOnceAndNoDeadlineWaitsForAnFd) {
  EXPECT_EQ(loop_->RunOnce(now_ - std::chrono::seconds(5)), 0);
  int called = 0;
  ASSERT_TRUE(loop_->Watch(ReadFd(0), EPOLLIN, [&](uint32_t) { ++called; }));
  Send(0);
  EXPECT_EQ(loop_->RunOnce(std::nullopt), 1);  // would block forever without the ready fd
  EXPECT_EQ(called, 1);
}

TEST_F(EventLoopTest, AnFdUnwatchedByAnEarlierHandlerOfTheSameWakeUpIsNotCalled) {
  int first = 0, second = 0;
  // Whichever runs first unwatches the other: exactly one of them runs.
  ASSERT_TRUE(loop_->Watch(ReadFd(0), EPOLLIN, [&](uint32_t) { ++first; loop_->Unwatch(ReadFd(1)); }));
  ASSERT_TRUE(loop_->Watch(ReadFd(1), EPOLLIN, [&](uint32_t) { ++second; loop_->Unwatch(ReadFd(0)); }));
  Send(0);
  Send(1);
  EXPECT_EQ(Poll(), 1);
  EXPECT_EQ(first + second, 1);
}

TEST_F(EventLoopTest, AnFdWatchedAgainDuringAWakeUpDoesNotGetItsOldRegistrationsEvent) {
  int old_handler = 0, new_handler = 0;
  ASSERT_TRUE(loop_->Watch(ReadFd(1), EPOLLIN, [&](uint32_t) { ++old_handler; }));
  ASSERT_TRUE(loop_->Watch(ReadFd(0), EPOLLIN, [&](uint32_t) {
    loop_->Watch(ReadFd(1), EPOLLIN, [&](uint32_t) { ++new_handler; });
    loop_->Unwatch(ReadFd(0));
  }));
  Send(0);
  Send(1);
  Poll();
  // Fd 1's event of this wake-up, if it came after fd 0's, belonged to the old registration: it is
  // dropped, not handed to the new handler. If it came first, the old handler had it.
  EXPECT_EQ(new_handler, 0);
  EXPECT_EQ(Poll(), 1);  // fd 1 is still readable: its new handler gets it now
  EXPECT_EQ(new_handler, 1);
}

TEST_F(EventLoopTest, AHandlerMayUnwatchItself) {
  int called = 0;
  ASSERT_TRUE(loop_->Watch(ReadFd(0), EPOLLIN, [&](uint32_t) {
    ++called;
    loop_->Unwatch(ReadFd(0));
  }));
  Send(0);
  EXPECT_EQ(Poll(), 1);
  EXPECT_EQ(Poll(), 0);  // still readable, no longer watched
  EXPECT_EQ(called, 1);
  EXPECT_FALSE(loop_->watching(ReadFd(0)));
}

TEST_F(EventLoopTest, NoInterestKeepsTheHandlerWithoutEventsUntilInterestReturns) {
  int called = 0;
  ASSERT_TRUE(loop_->Watch(ReadFd(0), EPOLLIN, [&](uint32_t) { ++called; }));
  ASSERT_TRUE(loop_->SetInterest(ReadFd(0), 0));
  Send(0);
  EXPECT_EQ(Poll(), 0);
  EXPECT_TRUE(loop_->watching(ReadFd(0)));
  ASSERT_TRUE(loop_->SetInterest(ReadFd(0), EPOLLIN));
  EXPECT_EQ(Poll(), 1);
  EXPECT_EQ(called, 1);
}

TEST_F(EventLoopTest, WhatEpollCannotWatchIsRefusedAndUnknownFdsAreIgnored) {
  UniqueFd file(::open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(file.valid());
  EXPECT_FALSE(loop_->Watch(file.get(), EPOLLIN, [](uint32_t) {}));
  EXPECT_FALSE(loop_->watching(file.get()));
  EXPECT_FALSE(loop_->SetInterest(ReadFd(2), EPOLLIN));  // never watched
  loop_->Unwatch(ReadFd(2));                             // harmless
}

}  // namespace
}  // namespace dtrun
