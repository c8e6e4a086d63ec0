#include "agent/failure_report.h"

#include <signal.h>

#include <fstream>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

TEST(FailureReportTest, ExitCodeIsTheWorkersOr128PlusSignal) {
  WorkerFailure f;
  f.exit_code = 7;
  EXPECT_EQ(ExitCodeOf(f), 7);
  f.signal = SIGKILL;
  EXPECT_EQ(ExitCodeOf(f), 137);
}

TEST(FailureReportTest, ReadsTorchelasticErrorFile) {
  std::string path = ::testing::TempDir() + "/error.json";
  std::ofstream(path) << R"({"message": {"message": "ValueError: boom", "extraInfo": )"
                         R"({"py_callstack": "Traceback ...\nValueError: boom", "timestamp": "1700000000"}}})";
  WorkerFailure f;
  f.error_file = path;
  ReadErrorFile(f);
  EXPECT_EQ(f.message, "ValueError: boom");
  EXPECT_EQ(f.traceback, "Traceback ...\nValueError: boom");
  EXPECT_EQ(f.error_timestamp, 1700000000);
}

TEST(FailureReportTest, MalformedErrorFileIsIgnored) {
  std::string path = ::testing::TempDir() + "/bad.json";
  std::ofstream(path) << "{not json";
  WorkerFailure f;
  f.error_file = path;
  ReadErrorFile(f);
  EXPECT_TRUE(f.message.empty());
}

TEST(FailureReportTest, RootCauseIsEarliestErrorTimestampElseFirstObserved) {
  std::vector<WorkerFailure> fs(3);
  EXPECT_EQ(RootCauseIndex(fs), 0u);
  fs[1].error_timestamp = 20;
  fs[2].error_timestamp = 10;
  EXPECT_EQ(RootCauseIndex(fs), 2u);
}

TEST(FailureReportTest, SummaryHasTorchrunSections) {
  WorkerFailure a;
  a.global_rank = 1;
  a.local_rank = 1;
  a.pid = 42;
  a.exit_code = 3;
  a.host = "host1";
  std::string s = FormatFailureSummary("train.py", {a});
  EXPECT_NE(s.find("train.py FAILED"), std::string::npos);
  EXPECT_NE(s.find("<NO_OTHER_FAILURES>"), std::string::npos);
  EXPECT_NE(s.find("Root Cause (first observed failure):"), std::string::npos);
  EXPECT_NE(s.find("rank      : 1 (local_rank: 1)"), std::string::npos);
  EXPECT_NE(s.find("exitcode  : 3 (pid: 42)"), std::string::npos);
  EXPECT_NE(s.find("host      : host1"), std::string::npos);
}

TEST(FailureReportTest, CollectiveTimeoutExitCodeIsExplained) {
  WorkerFailure f;
  f.exit_code = 75;
  f.host = "h";
  EXPECT_NE(FormatFailureSummary("t", {f}).find("a collective timed out"), std::string::npos);
}

}  // namespace
}  // namespace dtrun
