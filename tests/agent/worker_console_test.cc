// The console component (agent/worker_console.h) with a real worker writing to its pipes and the
// console written to a pipe the test reads, on an injected loop clock: whole lines go out as they
// come, a partial line (a prompt) once the stream has been quiet, and nothing is lost at exit.
#include "agent/worker_console.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;

class WorkerConsoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dtrun-console-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    ASSERT_EQ(::pipe2(console_, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(stdin_, O_CLOEXEC), 0);  // dtrun's stdin: nobody types
    ASSERT_EQ(::fcntl(console_[0], F_SETFL, O_NONBLOCK), 0);
    writer_ = std::make_shared<ConsoleWriter>(console_[1]);
    stdio_ = StdioWriters{writer_, writer_};
    loop_ = *EventLoop::Create([this] { return now_; });
  }
  void TearDown() override {
    if (group_) group_->SignalAll(SIGKILL);
    for (pid_t pid : pids_) ::waitpid(pid, nullptr, 0);
    writer_.reset();
    for (int fd : {console_[0], console_[1], stdin_[0], stdin_[1]}) ::close(fd);
    std::system(("rm -rf " + dir_).c_str());
  }
  void StartWorker(WorkerConsole& console, const std::string& script) {
    AgentOptions options;
    options.executable = "/bin/sh";
    options.argv = {"sh", "-c", script};
    options.program_name = "sh";
    rdzv::Assignment round;
    WorkerGroup::Io io;
    io.consoles = Consoles::ForStdio(stdio_);
    absl::StatusOr<std::unique_ptr<WorkerGroup>> g = WorkerGroup::Start(options, {}, AttemptPaths{"", dir_}, round, io);
    ASSERT_TRUE(g.ok()) << g.status();
    group_ = std::move(*g);
    pids_.push_back(group_->workers()[0].process.pid());
    console.OnRoundStarted(*group_, round);
  }
  // What reached the console so far.
  std::string Shown() {
    writer_->WaitWritten(-1, ConsoleWriter::kNoStallLimit);
    char buf[4096];
    for (ssize_t n; (n = ::read(console_[0], buf, sizeof buf)) > 0;) shown_.append(buf, n);
    return shown_;
  }
  // Runs the loop (each wait bounded by 10 s of real time) until `done`, at most 100 wake-ups.
  template <typename Done>
  bool RunUntil(Done done) {
    for (int i = 0; i < 100 && !done(); ++i) loop_->RunOnce(now_ + std::chrono::seconds(10));
    return done();
  }

  std::string dir_;
  int console_[2] = {-1, -1};
  int stdin_[2] = {-1, -1};
  std::shared_ptr<ConsoleWriter> writer_;
  StdioWriters stdio_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<WorkerGroup> group_;
  std::vector<pid_t> pids_;
  std::string shown_;
};

TEST_F(WorkerConsoleTest, AWholeLineGoesOutAtOnceAPromptOnceTheStreamIsQuiet) {
  WorkerConsole console(*loop_, stdio_, Consoles::ForStdio(stdio_));
  ASSERT_TRUE(console.Start(stdin_[0]));
  StartWorker(console, "printf 'hello\\nName: '; exec sleep 600");
  // The prompt is held until the stream has been quiet: the console asks to be woken then.
  ASSERT_TRUE(RunUntil([&] { return console.NextDeadline().has_value(); }));
  EXPECT_EQ(*console.NextDeadline(), now_ + OutputRelay::kQuietTime);
  EXPECT_NE(Shown().find("hello\n"), std::string::npos) << shown_;
  EXPECT_EQ(shown_.find("Name: "), std::string::npos) << shown_;

  now_ += OutputRelay::kQuietTime;
  console.OnWake(now_);
  EXPECT_NE(Shown().find("Name: "), std::string::npos) << shown_;
  EXPECT_FALSE(console.NextDeadline().has_value());
}

TEST_F(WorkerConsoleTest, WhatAnExitedWorkerLeftInItsPipeIsShownWhenTheGroupExits) {
  WorkerConsole console(*loop_, stdio_, Consoles::ForStdio(stdio_));
  ASSERT_TRUE(console.Start(stdin_[0]));
  StartWorker(console, "printf 'last words\\nno newline'");
  int status = 0;
  ASSERT_EQ(::waitpid(pids_[0], &status, 0), pids_[0]);
  pids_.clear();
  group_->OnExit(group_->workers()[0].process.pid(), status);
  console.OnGroupExited(*group_);  // before the loop ever read the pipe
  const std::string shown = Shown();
  EXPECT_NE(shown.find("last words\n"), std::string::npos) << shown;
  EXPECT_NE(shown.find("no newline"), std::string::npos) << shown;
  group_.reset();
}

}  // namespace
}  // namespace dtrun
