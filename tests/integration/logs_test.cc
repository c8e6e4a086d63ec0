// Console prefixes, whole lines, --log-dir layout, --redirects/--tee/--local-ranks-filter.
#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {


// The event log tells a run's story in order, in --log-dir and in --event-log, one JSON object per
// line: a failure in round 0, the restart, success, the end.
TEST(LogsTest, TheEventLogRecordsRoundsWorkersFailuresAndTheEnd) {
  const std::string dir = MakeTempDir();
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                             "--log-dir", dir + "/logs", "--event-log", dir + "/events.jsonl", "/bin/sh", "-c",
                             "[ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ] && exit 3; exit 0"});
  ASSERT_EQ(rc, 0) << out;
  std::vector<nlohmann::json> events;
  std::istringstream lines(ReadText(dir + "/events.jsonl"));
  for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
  std::vector<std::string> kinds;
  for (const auto& e : events) {
    kinds.push_back(e.at("event").get<std::string>() + "@" + std::to_string(e.at("round").get<int>()));
    EXPECT_TRUE(e.contains("ts_ms") && e.contains("run_id") && e.contains("host") && e.contains("pid")) << e;
  }
  // Worker exits within a round may come in either order.
  auto has = [&](const std::string& k) { return std::count(kinds.begin(), kinds.end(), k); };
  EXPECT_EQ(kinds.front(), "agent_start@-1");
  EXPECT_EQ(has("round_start@0"), 1);
  EXPECT_EQ(has("worker_start@0"), 2);
  EXPECT_EQ(has("worker_exit@0"), 2);
  EXPECT_EQ(has("failure@0"), 1);
  EXPECT_EQ(has("round_end@0"), 1);
  EXPECT_EQ(has("round_start@1"), 1);
  EXPECT_EQ(has("success@1"), 1);
  EXPECT_EQ(kinds.back(), "agent_end@1");
  const nlohmann::json& failure = *std::find_if(events.begin(), events.end(), [](const auto& e) { return e["event"] == "failure"; });
  EXPECT_EQ(failure["rank"], 1);
  EXPECT_EQ(failure["exit_code"], 3);
  EXPECT_EQ(events.back()["exit_code"], 0);
  EXPECT_EQ(events.back()["phase"], "SUCCEEDED");
  // The same records under --log-dir.
  std::string in_log_dir;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir + "/logs")) {
    if (e.path().filename() == "events.jsonl") in_log_dir = ReadText(e.path().string());
  }
  EXPECT_EQ(in_log_dir, ReadText(dir + "/events.jsonl"));
}

TEST(LogsTest, EveryConsoleLineIsOneWholePrefixedLine) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "4", Worker("print_lines.sh")},
                            {{"LINES", "2000"}});
  ASSERT_EQ(rc, 0);
  std::regex line_re("^\\[default([0-3])\\]:(line \\1 \\d+|err \\1)$");
  std::istringstream lines(out);
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("[dtrun]", 0) == 0 || line.find('*') != std::string::npos || line.rfind("Setting", 0) == 0 || line.empty()) continue;
    ASSERT_TRUE(std::regex_match(line, line_re)) << "mixed or broken line: " << line;
    ++count;
  }
  EXPECT_EQ(count, 4 * 2001);
}

TEST(LogsTest, PrefixTemplateCanShowGlobalRank) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2",
                             "--log-line-prefix-template", "<${rank}|${local_rank}> ", "/bin/echo", "hi"});
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("<1|1> hi"), std::string::npos) << out;
}

TEST(LogsTest, LogDirKeepsEveryAttemptAndNeverWipesAnEarlierRun) {
  std::string dir = MakeTempDir();
  std::vector<std::string> argv = {DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0",
                                   "--rdzv-id", "job", "--max-restarts", "1", "--log-dir", dir,
                                   Worker("fail_once.sh")};
  auto [rc, out] = RunToEnd(argv, {{"SUCCEED_AT", "1"}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(ReadText(dir + "/job/attempt_0/1/stdout.log").find("attempt 0 rank 1"), std::string::npos);
  EXPECT_NE(ReadText(dir + "/job/attempt_1/1/stdout.log").find("attempt 1 rank 1"), std::string::npos);
  auto [rc2, out2] = RunToEnd(argv, {{"SUCCEED_AT", "0"}});
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_TRUE(std::filesystem::exists(dir + "/job/attempt_1/1/stdout.log"));
  EXPECT_NE(ReadText(dir + "/job_1/attempt_0/0/stdout.log").find("attempt 0 rank 0"), std::string::npos);
}

TEST(LogsTest, RedirectsKeepOutputOffTheConsole) {
  std::string dir = MakeTempDir();
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id",
                             "r", "--redirects", "1", "--log-dir", dir, "/bin/echo", "quiet"});
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out.find("quiet"), std::string::npos) << out;
  EXPECT_EQ(ReadText(dir + "/r/attempt_0/0/stdout.log"), "quiet\n");
}

TEST(LogsTest, TeeWritesFilesAndConsole) {
  std::string dir = MakeTempDir();
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "1", "--master-port", "0", "--rdzv-id",
                             "t", "--tee", "3", "--log-dir", dir, "/bin/echo", "both"});
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("[default0]:both"), std::string::npos);
  EXPECT_EQ(ReadText(dir + "/t/attempt_0/0/stdout.log"), "both\n");
}

// torchrun's --duplicate-*-filters: matching lines of every rank, prefixed, in one file an attempt.
TEST(LogsTest, DuplicateFiltersCopyEveryRanksMatchingLinesIntoOneFileAnAttempt) {
  std::string dir = MakeTempDir();
  auto [rc, out] =
      RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "f", "--log-dir", dir,
                "--duplicate-stdout-filters", "loss,acc", "--duplicate-stderr-filters", "ERROR", "/bin/sh", "-c",
                "echo step $RANK loss 0.5; echo noise; echo ERROR on $RANK >&2; echo calm >&2"});
  ASSERT_EQ(rc, 0) << out;
  const std::string filtered = ReadText(dir + "/f/attempt_0/filtered_stdout.log");
  EXPECT_NE(filtered.find("[default0]:step 0 loss 0.5\n"), std::string::npos) << filtered;
  EXPECT_NE(filtered.find("[default1]:step 1 loss 0.5\n"), std::string::npos) << filtered;
  EXPECT_EQ(filtered.find("noise"), std::string::npos) << filtered;
  const std::string errors = ReadText(dir + "/f/attempt_0/filtered_stderr.log");
  EXPECT_NE(errors.find("[default1]:ERROR on 1\n"), std::string::npos) << errors;
  EXPECT_EQ(errors.find("calm"), std::string::npos) << errors;
  // Every line is still in the rank's own file.
  EXPECT_EQ(ReadText(dir + "/f/attempt_0/0/stdout.log"), "step 0 loss 0.5\nnoise\n");
}

TEST(LogsTest, LocalRanksFilterShowsOnlyChosenRanks) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "3",
                             "--local-ranks-filter", "0,2", "/bin/sh", "-c", "echo rank=$RANK"});
  ASSERT_EQ(rc, 0);
  EXPECT_NE(out.find("rank=0"), std::string::npos);
  EXPECT_EQ(out.find("rank=1"), std::string::npos);
  EXPECT_NE(out.find("rank=2"), std::string::npos);
}

}  // namespace
}  // namespace dtrun::testing
