// dtrun launches workers with torchrun's wiring and exits with their status.
#include <regex>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

TEST(LaunchTest, AllWorkersSucceedMeansExitZero) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "4", "/bin/true"});
  EXPECT_EQ(rc, 0) << out;
}

TEST(LaunchTest, WorkersGetRanksAndWorldSize) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "3", "/bin/sh", "-c",
                             "echo R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK"});
  ASSERT_EQ(rc, 0) << out;
  for (int r = 0; r < 3; ++r) {
    std::string line = "[default" + std::to_string(r) + "]:R=" + std::to_string(r) + " L=" +
                       std::to_string(r) + " W=3 LW=3 G=0";
    EXPECT_NE(out.find(line), std::string::npos) << out;
  }
}

TEST(LaunchTest, TwoStandaloneJobsGetDifferentPortsAndRunIds) {
  Harness a({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c",
             "echo ID=$TORCHELASTIC_RUN_ID:$MASTER_PORT; echo READY; exec sleep 300"});
  Harness b({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "/bin/sh", "-c",
             "echo ID=$TORCHELASTIC_RUN_ID:$MASTER_PORT; echo READY; exec sleep 300"});
  ASSERT_TRUE(a.WaitForOutput("READY"));
  ASSERT_TRUE(b.WaitForOutput("READY"));
  std::smatch ma, mb;
  std::string oa = a.out(), ob = b.out();
  ASSERT_TRUE(std::regex_search(oa, ma, std::regex("ID=(\\S+)")));
  ASSERT_TRUE(std::regex_search(ob, mb, std::regex("ID=(\\S+)")));
  EXPECT_NE(ma[1], mb[1]);
  ::kill(a.pid(), SIGTERM);
  ::kill(b.pid(), SIGTERM);
  EXPECT_EQ(a.Wait(), 128 + SIGTERM);
  EXPECT_EQ(b.Wait(), 128 + SIGTERM);
}

TEST(LaunchTest, LegacyLaunchScriptsReceiveLocalRankArgument) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0",
                             "--append-local-rank", "--local-rank-flag=--local_rank", "--no-python", "/bin/echo", "args:"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default1]:--local_rank=1 args:"), std::string::npos) << out;
}

TEST(LaunchTest, LocalRankComesBeforeTheScriptsRemainderArguments) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--append-local-rank",
                             SourceDir() + "/tests/integration/workers/legacy_launch_args.py", "--cfg", "r50.yaml",
                             "TRAIN.LR", "0.1"},
                            {{"PYTHON_EXEC", "/usr/bin/python3"}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default1]:local_rank=1 cfg=r50.yaml opts=['TRAIN.LR', '0.1']"), std::string::npos) << out;
  EXPECT_NE(out.find("[default0]:local_rank=0 cfg=r50.yaml opts=['TRAIN.LR', '0.1']"), std::string::npos) << out;
}

TEST(LaunchTest, StaticModeServesTheStoreOnTheGivenPort) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "1", "--master-addr", "127.0.0.1",
                             "--master-port", "0", "/bin/sh", "-c",
                             "echo ADDR=$MASTER_ADDR USE=$TORCHELASTIC_USE_AGENT_STORE RUN=$TORCHELASTIC_RUN_ID"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ADDR=127.0.0.1 USE=True RUN=none"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
