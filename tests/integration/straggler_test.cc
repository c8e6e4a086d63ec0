// Stragglers under dtrun (docs/DESIGN.md, "Stragglers"): the real trainers report each step's wait
// inside the gradient all-reduce and dtrun names the rank that keeps the others waiting — on the
// console, in the event log and at the job's end — and a Python DDP script does the same with
// dtrun.watch_ddp. The slow rank is made by the worker library's test-only fault
// (DTRUN_FAULT_SLOW) or by the script itself.
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

TEST(StragglerTest, ARecsysRankSlowedInItsBackwardIsNamedWithWhatItCosts) {
  if (!BinaryBuilt("train_recsys")) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  const std::string ratings = MakeRatings(200, 400);
  // Rank 1 sleeps 40 ms in every backward from step 3: far more than a step of this size takes.
  auto [rc, log] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--event-log", dir + "/events.jsonl",
                             BinDir() + "/train_recsys", ratings, "--output-dir", dir + "/run", "--epochs", "2",
                             "-b", "64", "-p", "1000"},
                            {{"DTRUN_FAULT_SLOW", "1:3:40"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("straggler: rank 1 arrived last at the gradient all-reduce in"), std::string::npos) << log;
  std::vector<nlohmann::json> named = EventsOfKind(dir + "/events.jsonl", "straggler");
  ASSERT_FALSE(named.empty()) << log;
  EXPECT_EQ(named[0]["rank"], 1);
  EXPECT_GE(named[0]["last_in"].get<int>(), 12);
  // 40 ms of every step spent waiting for rank 1.
  EXPECT_GT(named[0]["cost_share"].get<double>(), 0.2) << named[0].dump();
  for (const nlohmann::json& e : named) EXPECT_EQ(e["rank"], 1) << e.dump();
}

TEST(StragglerTest, APythonDdpScriptWithWatchDdpGetsItsSlowRankNamed) {
  const std::string dir = MakeTempDir();
  auto [rc, log] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--event-log", dir + "/events.jsonl",
                             Worker("ddp_straggler.py"), "--steps", "150", "--slow-rank", "0", "--slow-ms", "40"},
                            {{"PYTHON_EXEC", "/usr/bin/python3"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(rc, 0) << log;
  std::vector<nlohmann::json> named = EventsOfKind(dir + "/events.jsonl", "straggler");
  ASSERT_FALSE(named.empty()) << log;
  EXPECT_EQ(named[0]["rank"], 0) << named[0].dump();
  EXPECT_NE(log.find("straggler: rank 0 arrived last"), std::string::npos) << log;
}

}  // namespace
}  // namespace dtrun::testing
