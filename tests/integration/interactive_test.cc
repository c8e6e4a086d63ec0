// A person at a terminal: breakpoint() in one rank answered from dtrun's terminal, a tqdm bar that
// updates while the worker runs, output parsed without prefixes, and torchrun's "Other failures".
// The terminal tests run dtrun on a pseudo-terminal as a shell's foreground job.
#include <regex>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/pty_session.h"

namespace dtrun::testing {
namespace {

using std::chrono::seconds;


TEST(InteractiveTest, BreakpointInOneRankIsAnsweredFromTheTerminal) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  PtySession term({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("breakpoint_one_rank.py")},
                  {{"PYTHON_EXEC", *py}, {"PYTHONBREAKPOINT", ""}});
  ASSERT_TRUE(term.started());
  // The prompt has no newline: it must be shown anyway, with the rank that asks.
  ASSERT_TRUE(term.WaitFor("[default1]:(Pdb) ", seconds(60))) << term.output();
  size_t mark = term.output().size();
  term.Type("p secret * 10\n");
  ASSERT_TRUE(term.WaitFor("[default1]:430", seconds(30), mark)) << term.output();
  term.Type("c\n");
  EXPECT_EQ(term.Wait(seconds(60)), 0) << term.output();
  EXPECT_NE(term.output().find("DONE rank=1 secret=1043"), std::string::npos) << term.output();
  EXPECT_NE(term.output().find("DONE rank=0 secret=42"), std::string::npos) << term.output();
}

TEST(InteractiveTest, InputGoesToRankZeroWhenNoRankPrompts) {
  PtySession term({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "/bin/sh", "-c",
                   "if [ $LOCAL_RANK = 0 ]; then read line; echo \"got $line\"; fi"});
  ASSERT_TRUE(term.started());
  term.Type("hello\n");
  EXPECT_EQ(term.Wait(seconds(30)), 0) << term.output();
  EXPECT_NE(term.output().find("[default0]:got hello"), std::string::npos) << term.output();
}

TEST(InteractiveTest, ProgressBarUpdatesReachTheConsoleWhileTheWorkerRuns) {
  std::optional<std::string> py = TorchPython();
  if (!py || RunToEnd({*py, "-c", "import tqdm"}).first != 0) GTEST_SKIP() << "no Python with tqdm (python3-tqdm)";
  PtySession term({DtrunBinary(), "--standalone", "--nproc-per-node", "1", Worker("tqdm_bar.py")},
                  {{"PYTHON_EXEC", *py}});
  ASSERT_TRUE(term.started());
  // The worker is blocked on stdin with its bar at 2/4 and no newline written.
  ASSERT_TRUE(term.WaitFor("2/4", seconds(30))) << term.output();
  EXPECT_NE(term.output().find("\r[default0]:train:  50%"), std::string::npos) << term.output();
  term.Type("\n");
  EXPECT_EQ(term.Wait(seconds(30)), 0) << term.output();
  EXPECT_NE(term.output().find("4/4"), std::string::npos) << term.output();
  EXPECT_NE(term.output().find("[default0]:BAR_DONE"), std::string::npos) << term.output();
}

TEST(InteractiveTest, EmptyPrefixTemplateLeavesOutputUnprefixed) {
  const std::string json = "{\"step\": 1, \"loss\": 0.5}";
  for (bool from_env : {false, true}) {
    std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
    std::map<std::string, std::string> env;
    if (from_env) {
      env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "";
    } else {
      argv.insert(argv.end(), {"--log-line-prefix-template", ""});
    }
    argv.insert(argv.end(), {"/bin/echo", json});
    Harness h(argv, env);
    ASSERT_EQ(h.Wait(), 0) << h.all();
    EXPECT_EQ(h.out(), json + "\n" + json + "\n") << (from_env ? "environment" : "flag");
  }
}

TEST(InteractiveTest, RanksThatFailedOnTheirOwnAreListedUnderOtherFailures) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--shutdown-timeout", "5",
             Worker("two_ranks_fail.py")},
            {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(h.Wait(), 1) << h.all();
  const std::string& err = h.err();
  EXPECT_EQ(err.find("<NO_OTHER_FAILURES>"), std::string::npos) << err;
  size_t others = err.find("Failures:"), root = err.find("Root Cause");
  ASSERT_NE(others, std::string::npos) << err;
  ASSERT_NE(root, std::string::npos) << err;
  // rank 1 failed second: listed among the others; rank 0's error came first: the root cause.
  EXPECT_NE(err.substr(others, root - others).find("rank 1 broke too"), std::string::npos) << err;
  EXPECT_NE(err.substr(root).find("rank 0 broke first"), std::string::npos) << err;
}

// A rank killed without a word has no error file; its peer's error, a consequence, has one with a
// later time. The root cause is the killed rank: a failure without a record counts from when it
// was seen, not after every failure with one.
TEST(InteractiveTest, ARankKilledWithoutAWordIsTheRootCauseBeforeItsPeersLaterRecord) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  Harness h({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--shutdown-timeout", "5",
             Worker("killed_then_peer_raises.py")},
            {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(h.Wait(), 128 + 9) << h.all();
  const std::string& err = h.err();
  size_t others = err.find("Failures:"), root = err.find("Root Cause");
  ASSERT_NE(others, std::string::npos) << err;
  ASSERT_NE(root, std::string::npos) << err;
  EXPECT_NE(err.substr(others, root - others).find("Connection closed by peer"), std::string::npos) << err;
  EXPECT_NE(err.substr(root).find("rank      : 0 (local_rank: 0)"), std::string::npos) << err;
  EXPECT_NE(err.substr(root).find("exitcode  : -9"), std::string::npos) << err;
}

}  // namespace
}  // namespace dtrun::testing
