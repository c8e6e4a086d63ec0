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

}  // namespace
}  // namespace dtrun::testing
