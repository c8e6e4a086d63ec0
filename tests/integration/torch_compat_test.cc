// Real PyTorch clients: Debian's torch (Python) and our LibTorch C++ worker initialise
// process groups through dtrun's store; the worker environment matches torchrun's.
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {


TEST(TorchCompatTest, PythonGlooAllReduceAcrossFourWorkers) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "4", Worker("gloo_allreduce.py")},
                            {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(rc, 0) << out;
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(out.find("ALLREDUCE_OK rank=" + std::to_string(r) + " world=4 sum=10"), std::string::npos) << out;
  }
}

TEST(TorchCompatTest, PythonWorkersReinitialiseAfterARestart) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  // Attempt 0: every rank inits then rank 1 fails; attempt 1 must init again on the same store.
  std::string script = MakeTempDir() + "/restart.py";
  std::ofstream(script) << "import os, sys, torch.distributed as d\n"
                           "d.init_process_group('gloo')\n"
                           "d.barrier()\n"
                           "a = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
                           "print('INIT_OK attempt', a, flush=True)\n"
                           "sys.exit(3 if a == 0 and d.get_rank() == 1 else 0)\n";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", script},
                            {{"PYTHON_EXEC", *py}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default1]:INIT_OK attempt 1"), std::string::npos) << out;
}

// 1.13's numbering (DELETE_KEY 8) with every request its Python client has, and a timed-out WAIT.
TEST(TorchCompatTest, Torch113StoreClientRunsEveryRequestItHas) {
  std::optional<std::string> py = TorchPython();
  if (!py) GTEST_SKIP() << "no Python with torch";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("store_ops_1x.py")},
                            {{"PYTHON_EXEC", *py}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("STORE1X_OK 0"), std::string::npos) << out;
  EXPECT_NE(out.find("STORE1X_OK 1"), std::string::npos) << out;
}

TEST(TorchCompatTest, CppLibTorchWorkersAllReduce) {
  std::string bin = BinDir() + "/allreduce_check";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << "built without LibTorch (DTRUN_WITH_TORCH=OFF)";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "4", bin});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default3]:ALLREDUCE_OK rank=3 world=4 sum=10"), std::string::npos) << out;
}

TEST(TorchCompatTest, WorkerEnvironmentMatchesTorchrun) {
  std::optional<std::string> py = TorchPython();
  std::string torchrun = SourceDir() + "/../shared/tools/torchrun";
  if (!py || !std::filesystem::exists(torchrun)) GTEST_SKIP() << "needs python3-torch and ../shared/tools/torchrun";
  std::string a = MakeTempDir(), b = MakeTempDir();
  auto [rc1, o1] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Worker("dump_env.py")},
                            {{"PYTHON_EXEC", *py}, {"DUMP_DIR", a}});
  ASSERT_EQ(rc1, 0) << o1;
  auto [rc2, o2] = RunToEnd({*py, torchrun, "--standalone", "--nproc_per_node", "2", "--monitor_interval", "0.1",
                             Worker("dump_env.py")},
                            {{"DUMP_DIR", b}});
  ASSERT_EQ(rc2, 0) << o2;
  // Values that must differ (ids, ports, paths) or that differ by design (docs/DESIGN.md).
  std::set<std::string> differ = {"TORCHELASTIC_RUN_ID", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE", "DUMP_DIR",
                                  "TORCHELASTIC_USE_AGENT_STORE", "DTRUN_LAUNCH_ID", "_", "PYTHON_EXEC",
                                  "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                  // hang evidence dtrun adds (tracebacks on fatal signals)
                                  "PYTHONFAULTHANDLER",
                                  // progress reports: the worker's socket, its stacks file, the dtrun module
                                  "DTRUN_PROGRESS_SOCKET", "DTRUN_STACKS_FILE", "PYTHONPATH",
                                  "DTRUN_XXHASH_LIBRARY",
                                  // the agent's in-memory snapshot region for this local rank
                                  "DTRUN_SNAPSHOT_FD", "DTRUN_SNAPSHOT_EVERY", "DTRUN_SNAPSHOT_REPLICA_FD"};
  for (int r = 0; r < 2; ++r) {
    auto ours = nlohmann::json::parse(std::ifstream(a + "/" + std::to_string(r) + ".json"));
    auto theirs = nlohmann::json::parse(std::ifstream(b + "/" + std::to_string(r) + ".json"));
    for (auto& [k, v] : theirs.items()) {
      if (differ.count(k)) continue;
      ASSERT_TRUE(ours.contains(k)) << "dtrun does not set " << k;
      EXPECT_EQ(ours[k], v) << k;
    }
    for (auto& [k, v] : ours.items()) {
      if (!differ.count(k)) {
        EXPECT_TRUE(theirs.contains(k)) << "torchrun does not set " << k;
      }
    }
    EXPECT_EQ(ours["TORCH_NCCL_ASYNC_ERROR_HANDLING"], theirs["NCCL_ASYNC_ERROR_HANDLING"]);  // 2.x vs 1.13 name
  }
}

}  // namespace
}  // namespace dtrun::testing
