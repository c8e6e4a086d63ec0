// No stray processes: signals are forwarded, grace then SIGKILL, and kill -9 of dtrun leaves
// neither workers nor their detached grandchildren behind.
#include <dirent.h>
#include <signal.h>

#include <fstream>
#include <regex>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {


std::vector<pid_t> PidsAfter(const std::string& text, const std::string& tag) {
  std::vector<pid_t> pids;
  std::regex re(tag + " (\\d+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

// Starts 2 workers that each have a detached grandchild; returns once both reported.
struct Job {
  std::unique_ptr<Harness> h;
  std::vector<pid_t> workers, grandchildren;
};
Job StartJob(std::map<std::string, std::string> env = {}, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(Worker("with_grandchild.sh"));
  Job j;
  j.h = std::make_unique<Harness>(argv, env);
  EXPECT_TRUE(j.h->WaitForOutput("READY 0"));
  EXPECT_TRUE(j.h->WaitForOutput("READY 1"));
  j.workers = PidsAfter(j.h->out(), "WORKER");
  j.grandchildren = PidsAfter(j.h->out(), "GRANDCHILD");
  EXPECT_EQ(j.workers.size(), 2u);
  EXPECT_EQ(j.grandchildren.size(), 2u);
  return j;
}

void ExpectAllGone(const Job& j) {
  for (pid_t p : j.workers) EXPECT_TRUE(WaitForPidExit(p, std::chrono::seconds(10))) << "worker " << p;
  for (pid_t p : j.grandchildren) EXPECT_TRUE(WaitForPidExit(p, std::chrono::seconds(10))) << "grandchild " << p;
}

class SignalCleanupTest : public ::testing::TestWithParam<int> {};

TEST_P(SignalCleanupTest, HandledSignalIsForwardedAndEverythingEnds) {
  Job j = StartJob();
  ::kill(j.h->pid(), GetParam());
  EXPECT_EQ(j.h->Wait(std::chrono::seconds(60)), 128 + GetParam()) << j.h->all();
  // The forwarded signal ended the workers, not SIGKILL at the end of the shutdown timeout.
  EXPECT_EQ(j.h->err().find("sending SIGKILL"), std::string::npos) << j.h->err();
  ExpectAllGone(j);
}

INSTANTIATE_TEST_SUITE_P(Signals, SignalCleanupTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP, SIGQUIT));

TEST(SignalCleanupExtraTest, WorkersIgnoringTheSignalAreKilledAfterShutdownTimeout) {
  Job j = StartJob({{"IGNORE_TERM", "1"}}, {"--shutdown-timeout", "0.5"});
  ::kill(j.h->pid(), SIGTERM);
  EXPECT_EQ(j.h->Wait(std::chrono::seconds(60)), 128 + SIGTERM) << j.h->all();
  EXPECT_NE(j.h->err().find("sending SIGKILL"), std::string::npos) << j.h->err();
  ExpectAllGone(j);
}

TEST(SignalCleanupExtraTest, KillNineOfDtrunLeavesNoWorkerOrGrandchild) {
  Job j = StartJob();
  ::kill(j.h->pid(), SIGKILL);
  EXPECT_EQ(j.h->Wait(std::chrono::seconds(30)), 128 + SIGKILL);
  ExpectAllGone(j);
}

TEST(SignalCleanupExtraTest, ConfiguredSignalsToHandle) {
  Job j = StartJob({}, {"--signals-to-handle", "SIGUSR1,SIGTERM"});
  ::kill(j.h->pid(), SIGUSR1);
  EXPECT_EQ(j.h->Wait(std::chrono::seconds(60)), 128 + SIGUSR1) << j.h->all();
  ExpectAllGone(j);
}

TEST(SignalCleanupExtraTest, GrandchildrenAreEndedWhenTheGroupFails) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c",
                             "setsid sleep 300 & echo GRANDCHILD $!; exit 5"});
  EXPECT_EQ(rc, 5) << out;
  for (pid_t p : PidsAfter(out, "GRANDCHILD")) EXPECT_TRUE(WaitForPidExit(p, std::chrono::seconds(10)));
}

}  // namespace
}  // namespace dtrun::testing
