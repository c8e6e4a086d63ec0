// The FileTimer component (agent/file_timer_service.h) on an injected loop clock and wall clock,
// with a real worker group of one `sleep` and a real timer pipe: an expired timer signals the
// round's worker, and never a process that is not one of its workers.
#include "agent/file_timer_service.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

class FileTimerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dtrun-filetimer-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    events_ = EventLog({dir_ + "/events.jsonl"}, "run", "host");
    loop_ = *EventLoop::Create([this] { return now_; });
    options_.executable = "/bin/sleep";
    options_.argv = {"sleep", "600"};
    options_.program_name = "sleep";
    options_.nproc_per_node = 1;
    round_.round = 3;
    WorkerGroup::Io io;
    io.consoles = Consoles::ForStdio(StdioWriters::Start());
    absl::StatusOr<std::unique_ptr<WorkerGroup>> g = WorkerGroup::Start(options_, {}, AttemptPaths{"", dir_}, round_, io);
    ASSERT_TRUE(g.ok()) << g.status();
    group_ = std::move(*g);
    worker_ = group_->workers()[0].process.pid();
  }
  void TearDown() override {
    if (group_) {
      group_->SignalAll(SIGKILL);
      int status = 0;
      ::waitpid(worker_, &status, 0);
    }
    std::system(("rm -rf " + dir_).c_str());
  }
  // A request as torchelastic's FileTimerClient writes it.
  void Request(int64_t pid, const std::string& scope, double expiration, int signo) {
    const int fd = ::open((dir_ + "/timers").c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0);
    const std::string line = absl::StrFormat(
        R"({"version": 1, "pid": %d, "scope_id": "%s", "expiration_time": %.3f, "signal": %d})" "\n", pid, scope,
        expiration, signo);
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    ::close(fd);
    ASSERT_EQ(loop_->RunOnce(now_), 1);  // the pipe is readable: the service takes the request
  }
  int Expired() {
    int n = 0;
    std::ifstream in(dir_ + "/events.jsonl");
    for (std::string line; std::getline(in, line);) n += nlohmann::json::parse(line)["event"] == "timer_expired";
    return n;
  }
  // Whether `pid` (our child) was ended by `signo`, waiting at most until it is reaped.
  static bool EndedBy(pid_t pid, int signo) {
    int status = 0;
    return ::waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) && WTERMSIG(status) == signo;
  }

  std::string dir_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  double unix_now_ = 1.7e9;
  AgentOptions options_;
  rdzv::Assignment round_;
  EventLog events_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<WorkerGroup> group_;
  pid_t worker_ = -1;
};

TEST_F(FileTimerServiceTest, AnExpiredTimerSignalsTheWorkerWhenItsWallClockExpiryComes) {
  FileTimerService timers(*loop_, events_, [this] { return now_; }, [this] { return unix_now_; });
  timers.Open(dir_ + "/timers");
  timers.OnRoundStarted(*group_, round_);
  Request(worker_, "step", unix_now_ + 30, SIGKILL);
  ASSERT_EQ(timers.armed(), 1u);
  // The loop is told to wake when the timer's wall-clock expiry comes, on its own clock.
  ASSERT_TRUE(timers.NextDeadline().has_value());
  EXPECT_EQ(*timers.NextDeadline(), now_ + std::chrono::seconds(30));

  unix_now_ += 29;
  timers.OnWake(now_);
  EXPECT_EQ(Expired(), 0);
  unix_now_ += 1;
  timers.OnWake(now_);
  EXPECT_EQ(Expired(), 1);
  EXPECT_EQ(timers.armed(), 0u);
  EXPECT_TRUE(EndedBy(worker_, SIGKILL));
  group_.reset();
}

TEST_F(FileTimerServiceTest, AReleasedTimerNeverFires) {
  FileTimerService timers(*loop_, events_, [this] { return now_; }, [this] { return unix_now_; });
  timers.Open(dir_ + "/timers");
  timers.OnRoundStarted(*group_, round_);
  Request(worker_, "step", unix_now_ + 5, SIGKILL);
  Request(worker_, "step", -1, 0);  // FileTimerClient's release
  EXPECT_EQ(timers.armed(), 0u);
  EXPECT_FALSE(timers.NextDeadline().has_value());
  unix_now_ += 60;
  timers.OnWake(now_);
  EXPECT_EQ(Expired(), 0);
  EXPECT_EQ(::kill(worker_, 0), 0);  // still running
}

TEST_F(FileTimerServiceTest, APidThatIsNotOneOfTheRoundsWorkersIsNeverSignalled) {
  const pid_t other = ::fork();
  ASSERT_GE(other, 0);
  if (other == 0) {
    ::pause();
    ::_exit(0);
  }
  FileTimerService timers(*loop_, events_, [this] { return now_; }, [this] { return unix_now_; });
  timers.Open(dir_ + "/timers");
  timers.OnRoundStarted(*group_, round_);
  Request(other, "step", unix_now_ - 1, SIGKILL);
  timers.OnWake(now_);
  EXPECT_EQ(Expired(), 0);
  EXPECT_EQ(::kill(other, 0), 0);  // alive: the claim in the request named no worker of ours
  ::kill(other, SIGKILL);
  EXPECT_TRUE(EndedBy(other, SIGKILL));
}

TEST_F(FileTimerServiceTest, ANewRoundStartsWithNoTimers) {
  FileTimerService timers(*loop_, events_, [this] { return now_; }, [this] { return unix_now_; });
  timers.Open(dir_ + "/timers");
  timers.OnRoundStarted(*group_, round_);
  Request(worker_, "step", unix_now_ + 5, SIGKILL);
  timers.OnGroupExited(*group_);
  EXPECT_EQ(timers.armed(), 0u);
  EXPECT_FALSE(timers.NextDeadline().has_value());  // and no group: nothing to wake for
}

}  // namespace
}  // namespace dtrun
