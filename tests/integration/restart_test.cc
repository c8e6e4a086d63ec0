// Failure handling: restarts with TORCHELASTIC_RESTART_COUNT, exit codes, the failure summary.
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {


TEST(RestartTest, FailedGroupIsRestartedAndCanThenSucceed) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts",
                             "2", Worker("fail_once.sh")},
                            {{"SUCCEED_AT", "1"}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("attempt 0 rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("attempt 1 rank 1"), std::string::npos) << out;
  EXPECT_NE(out.find("round 1: worker rank 1 on "), std::string::npos) << out;
  EXPECT_NE(out.find("restart 1/2"), std::string::npos) << out;
}

TEST(RestartTest, ExhaustedRestartsExitWithTheRootCauseCode) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "3", "--max-restarts",
                             "1", Worker("fail_once.sh")},
                            {{"SUCCEED_AT", "9"}, {"CODE", "7"}});
  EXPECT_EQ(rc, 7) << out;
  EXPECT_NE(out.find("attempt 1 rank 1"), std::string::npos) << out;
  EXPECT_EQ(out.find("attempt 2"), std::string::npos) << out;
  EXPECT_NE(out.find("fail_once.sh FAILED"), std::string::npos) << out;
  EXPECT_NE(out.find("rank      : 1 (local_rank: 1)"), std::string::npos) << out;
  EXPECT_NE(out.find("exitcode  : 7"), std::string::npos) << out;
  // Workers we stopped ourselves are not reported as failures.
  EXPECT_NE(out.find("<NO_OTHER_FAILURES>"), std::string::npos) << out;
}

TEST(RestartTest, WorkerKilledBySignalGives128PlusSignal) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("kill_self.sh")});
  EXPECT_EQ(rc, 128 + SIGKILL) << out;
  EXPECT_NE(out.find("exitcode  : -9"), std::string::npos) << out;
  EXPECT_NE(out.find("Signal 9 (SIGKILL)"), std::string::npos) << out;
}

TEST(RestartTest, SummaryShowsTheErrorFileTraceback) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "1", Worker("error_file.sh")});
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("ValueError: bad batch"), std::string::npos) << out;
  EXPECT_NE(out.find("error.json"), std::string::npos) << out;
}

// The text after "Root Cause" in dtrun's summary.
std::string RootCause(const std::string& out) {
  const size_t at = out.find("Root Cause");
  return at == std::string::npos ? "" : out.substr(at);
}

TEST(RestartTest, TheSummaryShowsTheUncaughtExceptionOfAScriptWithoutAnErrorFile) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                             Worker("uncaught.py"), "raise"},
                            {{"PYTHON_EXEC", "/usr/bin/python3"}});
  EXPECT_EQ(rc, 1) << out;
  const std::string root = RootCause(out);
  EXPECT_NE(root.find("rank      : 1 (local_rank: 1)"), std::string::npos) << out;
  EXPECT_NE(root.find("error_file: <N/A>"), std::string::npos) << out;
  // The whole chain, from the first exception to the one that ended the script.
  EXPECT_NE(root.find("traceback : Traceback (most recent call last):\n"), std::string::npos) << out;
  EXPECT_NE(root.find("KeyError: 7"), std::string::npos) << out;
  EXPECT_NE(root.find("in load_batch\n    raise ValueError(\"bad batch %d\" % i) from e"), std::string::npos) << out;
  EXPECT_NE(root.find("ValueError: bad batch 7\n"), std::string::npos) << out;
  EXPECT_EQ(root.find("step 1 done"), std::string::npos) << out;
  // The restart line says it too.
  EXPECT_NE(out.find("failed (exit code 1: ValueError: bad batch 7); restart 1/1"), std::string::npos) << out;
  EXPECT_EQ(root.find("To enable traceback"), std::string::npos) << out;
}

// rich's traceback handler, common in training scripts, draws the same chain in boxes.
TEST(RestartTest, TheSummaryShowsATracebackThatRichDrew) {
  if (RunToEnd({"/usr/bin/python3", "-c", "import rich.traceback"}).first != 0) {
    GTEST_SKIP() << "no rich for /usr/bin/python3 (python3-rich)";
  }
  auto [rc, out] = RunToEnd(
      {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", Worker("uncaught.py"), "rich"},
      {{"PYTHON_EXEC", "/usr/bin/python3"}});
  EXPECT_EQ(rc, 1) << out;
  const std::string root = RootCause(out);
  EXPECT_NE(root.find("Traceback (most recent call last) "), std::string::npos) << out;
  EXPECT_NE(root.find("KeyError: 7\n\nThe above exception was the direct cause"), std::string::npos) << out;
  EXPECT_NE(root.find("ValueError: bad batch 7\n"), std::string::npos) << out;
  EXPECT_EQ(root.find("no error file and no Python traceback"), std::string::npos) << out;
  EXPECT_NE(out.find("failed (exit code 1: ValueError: bad batch 7); restart 1/1"), std::string::npos) << out;
}

TEST(RestartTest, TheSummaryShowsWhereASegfaultingScriptWas) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("uncaught.py"), "segfault"},
                            {{"PYTHON_EXEC", "/usr/bin/python3"}});
  EXPECT_EQ(rc, 128 + SIGSEGV) << out;
  const std::string root = RootCause(out);
  EXPECT_NE(root.find("exitcode  : -11"), std::string::npos) << out;
  EXPECT_NE(root.find("traceback : Fatal Python error: Segmentation fault\n"), std::string::npos) << out;
  EXPECT_NE(root.find("uncaught.py\", line 22 in <module>"), std::string::npos) << out;
  EXPECT_EQ(root.find("Traceback"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
