#include "agent/failure_report.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <ctime>
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

TEST(FailureReportTest, WrongTypesAreIgnoredFieldByField) {
  for (const char* json : {R"({"message": {"message": 5}})", R"({"message": [1, 2]})", R"([])", R"("x")",
                           R"({"message": {"message": "m", "extraInfo": {"py_callstack": 7, "timestamp": {}}}})",
                           R"({"message": {"message": "m", "extraInfo": "nope"}})", R"({"message": null})"}) {
    WorkerFailure f;
    ParseErrorRecord(json, f);  // must not throw
    EXPECT_TRUE(f.traceback.empty()) << json;
    EXPECT_EQ(f.error_timestamp, 0) << json;
  }
  WorkerFailure f;
  ParseErrorRecord(R"({"message": {"message": "m", "extraInfo": {"timestamp": 1700000001.5}}})", f);
  EXPECT_EQ(f.message, "m");
  EXPECT_EQ(f.error_timestamp, 1700000001.5);  // a number is accepted as well as torch's string
  WorkerFailure g;
  ParseErrorRecord(R"({"message": {"message": "m", "extraInfo": {"timestamp": "nan"}}})", g);
  EXPECT_EQ(g.error_timestamp, 0);
}

// A record's file written at `mtime` (seconds since the epoch, with a fraction).
std::string RecordFileAt(const std::string& name, const std::string& json, double mtime) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << json;
  const timespec times[2] = {{0, UTIME_OMIT},
                             {static_cast<time_t>(mtime), static_cast<long>((mtime - std::floor(mtime)) * 1e9)}};
  EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  return path;
}

// Two ranks that failed within one second: torchelastic's whole seconds tie them, the files'
// modification times order them, so the rank that raised is the root cause, not the peer whose
// collective then failed. A time in another second than the record's is not believed.
TEST(FailureReportTest, TheFilesTimeOrdersFailuresWithinOneSecond) {
  const std::string record = R"({"message": {"message": "m", "extraInfo": {"timestamp": "1700000000"}}})";
  std::vector<WorkerFailure> fs(2);
  fs[0].error_file = RecordFileAt("peer.json", record, 1700000000.9);
  fs[1].error_file = RecordFileAt("raiser.json", record, 1700000000.1);
  for (WorkerFailure& f : fs) ReadErrorFile(f);
  EXPECT_NEAR(fs[0].error_timestamp, 1700000000.9, 1e-3);
  EXPECT_EQ(RootCauseIndex(fs), 1u);
  WorkerFailure touched;
  touched.error_file = RecordFileAt("touched_later.json", record, 1700000005.5);
  ReadErrorFile(touched);
  EXPECT_EQ(touched.error_timestamp, 1700000000);
}

TEST(FailureReportTest, LongTextsAreCutAndSayWhereTheRestIs) {
  WorkerFailure f;
  f.error_file = "/runs/error.json";
  std::string big(3 * kMaxErrorTextBytes, 'x');
  ParseErrorRecord(R"({"message": ")" + big + R"("})", f);
  EXPECT_LT(f.message.size(), kMaxErrorTextBytes + 100);
  EXPECT_NE(f.message.find("more bytes in /runs/error.json]"), std::string::npos);
}

TEST(FailureReportTest, OnlyRegularFilesAreReadAndNeverBlock) {
  const std::string dir = ::testing::TempDir();
  const std::string fifo = dir + "/fifo.json", link = dir + "/link.json", real = dir + "/real.json";
  ::unlink(fifo.c_str());
  ::unlink(link.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(real) << R"({"message": "secret"})";
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& path : {fifo, link, dir}) {
    WorkerFailure f;
    f.error_file = path;
    ReadErrorFile(f);  // a FIFO with no writer would block a plain open/read forever
    EXPECT_TRUE(f.message.empty()) << path;
  }
  std::ofstream(dir + "/huge.json") << std::string(kMaxErrorFileBytes + 1, ' ');
  WorkerFailure h;
  h.error_file = dir + "/huge.json";
  ReadErrorFile(h);
  EXPECT_NE(h.message.find("more than the 1048576 read"), std::string::npos) << h.message;
}

TEST(FailureReportTest, RootCauseIsTheEarliestByRecordElseByWhenItWasSeen) {
  std::vector<WorkerFailure> fs(3);
  EXPECT_EQ(RootCauseIndex(fs), 0u);  // nothing known: the first observed
  fs[0].time_unix_ms = 30000;
  fs[1].error_timestamp = 20;
  fs[2].error_timestamp = 10;
  EXPECT_EQ(RootCauseIndex(fs), 2u);
  // A rank SIGKILLed at 100.000 s (no record, seen ending then) and its peer, whose all-reduce
  // failed on the closed connection and wrote its record at 100.050 s: the killed rank.
  std::vector<WorkerFailure> killed(2);
  killed[0].error_timestamp = 100.050;
  killed[0].time_unix_ms = 100080;
  killed[1].time_unix_ms = 100000;
  EXPECT_EQ(RootCauseIndex(killed), 1u);
  // Equal times: the first observed.
  std::vector<WorkerFailure> tied(2);
  tied[0].time_unix_ms = tied[1].time_unix_ms = 5000;
  EXPECT_EQ(RootCauseIndex(tied), 0u);
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
  f.traceback = "(no error file and no Python traceback; the last lines of its stderr:)\nwatchdog: all_reduce";
  const std::string summary = FormatFailureSummary("t", {f});  // read from its stderr: explained first
  EXPECT_NE(summary.find("traceback : a collective timed out: the worker hung (peer lost or stuck) and its watchdog "
                         "ended it\n(no error file"),
            std::string::npos)
      << summary;
}

TEST(FailureReportTest, AWorkerTheOutOfMemoryKillerEndedIsNamedSoWithNoErrorFile) {
  WorkerFailure f;
  f.host = "h";
  f.pid = 7;
  f.signal = SIGKILL;
  f.kind = rdzv::FailureKind::kOomKilled;
  f.message = "killed by the kernel's out-of-memory killer (oom_kill 0 -> 1 in memory.events)";  // set by the agent
  const std::string summary = FormatFailureSummary("t", {f});
  EXPECT_NE(summary.find("exitcode  : -9 (pid: 7)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("error_file: <N/A>"), std::string::npos) << summary;
  EXPECT_NE(summary.find("traceback : killed by the kernel's out-of-memory killer"), std::string::npos) << summary;
  EXPECT_EQ(rdzv::FailureKindFromName(rdzv::FailureKindName(f.kind)), rdzv::FailureKind::kOomKilled);
}

}  // namespace
}  // namespace dtrun
