// Hangs found and explained: progress reports (the dtrun Python module, the C++ client), the
// heartbeat and section timeouts, D state, stacks of every worker before the stop, the likely
// culprit, the restart-loop breaker, torchelastic's FileTimer, and a hostile reporter.
#include <filesystem>

#include "base/exit_codes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

namespace fs = std::filesystem;

// The run's files under --log-dir DIR (DIR/<run id>/...).
std::string RunDir(const std::string& log_dir) {
  for (const auto& e : fs::directory_iterator(log_dir)) return e.path().string();
  return "";
}
std::vector<nlohmann::json> Events(const std::string& run_dir, const std::string& kind) {
  return EventsOfKind(run_dir + "/events.jsonl", kind);
}

class HangTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> py = TorchPython();
    if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
    python_ = *py;
    logs_ = MakeTempDir() + "/logs";
  }
  std::pair<int, std::string> Dtrun(std::vector<std::string> flags, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--log-dir", logs_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    env["PYTHON_EXEC"] = python_;
    return RunToEnd(argv, env);
  }
  std::string python_, logs_;
};

// --heartbeat-timeout 2 and workers that take 5 s to exit after their last step: not a hang. The
// teardown bound (--teardown-timeout) rules once a rank reported its last step, or once a worker of
// its group exited successfully; past that bound it is a hang.
TEST_F(HangTest, ARankTearingDownAfterItsLastStepIsNotAHang) {
  for (const char* mode : {"announce", "peer"}) {
    auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--heartbeat-timeout", "2", Worker("slow_teardown.py"), "20", "5",
                            mode});
    EXPECT_EQ(rc, 0) << mode << ": " << out;
    EXPECT_NE(out.find("EXITED 1"), std::string::npos) << mode << ": " << out;
    EXPECT_TRUE(Events(RunDir(logs_), "hang").empty()) << mode;
    fs::remove_all(logs_);
  }
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--heartbeat-timeout", "2", "--teardown-timeout", "1",
                          Worker("slow_teardown.py"), "20", "30", "announce"});
  EXPECT_EQ(rc, kHangExitCode) << out;
  EXPECT_NE(out.find("(--teardown-timeout 1)"), std::string::npos) << out;
}

// Rank 1 blocks before its all_reduce; rank 0 waits in it. Both stop reporting; the stacks tell
// which is elsewhere. Every rank's Python stacks are in the attempt's dir, the job restarts and
// completes.
TEST_F(HangTest, AStuckPythonRankIsFoundExplainedWithEveryRanksStacksAndRestarted) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--max-restarts", "1", "--heartbeat-timeout", "2",
                          Worker("hang_in_step.py")},
                         {{"HANG_RANK", "1"}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("hang detected"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 is the likely culprit"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 finished attempt 1"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 finished attempt 1"), std::string::npos) << out;
  const std::string run = RunDir(logs_);
  const std::string stuck = ReadText(run + "/attempt_0/1/stacks.txt");
  const std::string waiting = ReadText(run + "/attempt_0/0/stacks.txt");
  EXPECT_NE(stuck.find("in block_forever"), std::string::npos) << stuck;
  EXPECT_NE(waiting.find("in all_reduce"), std::string::npos) << waiting;
  std::vector<nlohmann::json> hangs = Events(run, "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0]["rank"], 1);
  EXPECT_EQ(hangs[0]["section"], "step");
  EXPECT_EQ(hangs[0]["step"], 2);  // the last step it finished
  EXPECT_EQ(hangs[0]["rule"], "heartbeat");
}

TEST_F(HangTest, AHangWithNoRestartLeftEndsWithTheHangExitCodeAndASummaryNamingTheRank) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--section-timeout", "step=2", Worker("hang_in_step.py")},
                         {{"HANG_RANK", "1"}});
  EXPECT_EQ(rc, kHangExitCode) << out;
  const size_t root = out.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << out;
  EXPECT_NE(out.find("rank      : 1 (local_rank: 1)", root), std::string::npos) << out;
  EXPECT_NE(out.find("stuck in section 'step'", root), std::string::npos) << out;
  EXPECT_NE(out.find("stacks.txt", root), std::string::npos) << out;
}

// The checkpoint outlasts the heartbeat timeout, but has a timeout of its own. The heartbeat
// timeout still covers every gap outside sections (the steps, and the interpreter's exit after
// the last heartbeat): 4 s, not 1, so that a loaded machine does not make those a hang.
TEST_F(HangTest, ALongSectionWithItsOwnTimeoutIsNotAHang) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--heartbeat-timeout", "4", "--section-timeout",
                          "checkpoint=60", Worker("hang_in_step.py")},
                         {{"CHECKPOINT_SECONDS", "6"}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("hang detected"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 finished attempt 0"), std::string::npos) << out;
}

// A rank that hangs at the same step every time: the second attempt without progress ends the
// job, though restarts are left.
TEST_F(HangTest, AttemptsThatMakeNoProgressEndTheJobBeforeTheRestartsRunOut) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--max-restarts", "10", "--heartbeat-timeout", "1.5",
                          "--max-attempts-without-progress", "2", Worker("hang_in_step.py")},
                         {{"HANG_RANK", "0"}, {"HANG_STEP", "0"}, {"ALWAYS_HANG", "1"}});
  EXPECT_EQ(rc, kNoProgressExitCode) << out;
  EXPECT_NE(out.find("2 attempts in a row made no progress"), std::string::npos) << out;
  EXPECT_EQ(Events(RunDir(logs_), "round_start").size(), 2u);
}

TEST_F(HangTest, TorchelasticFileTimerScriptsWorkUnchanged) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--max-restarts", "1", Worker("file_timer.py")},
                         {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("FileTimer 'work' expired; sending SIGKILL"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 done in attempt 1"), std::string::npos) << out;
  std::vector<nlohmann::json> expired = Events(RunDir(logs_), "timer_expired");
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0]["rank"], 1);
}

TEST_F(HangTest, AFloodingMalformedReporterDisturbsNeitherTheAgentNorTheOtherRank) {
  auto [rc, out] = Dtrun({"--nproc-per-node", "2", "--heartbeat-timeout", "2", Worker("hostile_reporter.py")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rank 0 reported 30 steps"), std::string::npos) << out;
  EXPECT_NE(out.find("hostile datagrams"), std::string::npos) << out;
  EXPECT_NE(out.find("local rank 1 sent a malformed progress report"), std::string::npos) << out;
  EXPECT_NE(out.find("which is not that worker of the running round"), std::string::npos) << out;
  EXPECT_EQ(out.find("hang detected"), std::string::npos) << out;
  std::vector<nlohmann::json> exits = Events(RunDir(logs_), "worker_exit");
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    if (e["rank"] == 0) {
      EXPECT_EQ(e["last_step"], 29);
    }
  }
}

// Native workers: stacks from outside (eu-stack or gdb), no Python involved.
TEST(NativeHangTest, AStuckNativeRankIsFoundAndItsStacksReadFromOutside) {
  const std::string logs = MakeTempDir() + "/logs";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--log-dir", logs, "--nproc-per-node", "2",
                             "--max-restarts", "1", "--heartbeat-timeout", "1.5", BinDir() + "/stuck_native", "hang",
                             "1"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("hang detected"), std::string::npos) << out;
  const std::string stacks = ReadText(RunDir(logs) + "/attempt_0/1/stacks.txt");
  if (stacks.find("no stack tool is installed") != std::string::npos) {
    GTEST_SKIP() << "neither eu-stack (elfutils) nor gdb is installed";
  }
  EXPECT_NE(stacks.find("BlockForever"), std::string::npos) << stacks;
  EXPECT_NE(ReadText(RunDir(logs) + "/attempt_0/0/stacks.txt").find("WaitForPeers"), std::string::npos);
}

// No worker code at all: a worker in uninterruptible sleep is a hang.
TEST(NativeHangTest, AWorkerInUninterruptibleSleepIsAHang) {
  const std::string logs = MakeTempDir() + "/logs";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--log-dir", logs, "--nproc-per-node", "1",
                             "--max-restarts", "1", "--dstate-timeout", "1", BinDir() + "/stuck_native", "dstate"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("in uninterruptible sleep (D state)"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 done"), std::string::npos) << out;
  std::vector<nlohmann::json> hangs = Events(RunDir(logs), "hang");
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0]["rule"], "dstate");
}

}  // namespace
}  // namespace dtrun::testing
