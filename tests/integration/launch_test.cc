// dtrun launches workers with torchrun's wiring and exits with their status.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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

// As newest torchrun: a single-node job that names no port or endpoint gets a free port, so a
// second job on the machine runs beside the first (both used to bind 29500).
TEST(LaunchTest, TwoSingleNodeJobsWithoutPortsRunSideBySide) {
  Harness a({DtrunBinary(), "--nproc-per-node", "1", "/bin/sh", "-c", "echo PORT=$MASTER_PORT; echo READY; exec sleep 300"});
  ASSERT_TRUE(a.WaitForOutput("READY")) << a.all();
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "/bin/sh", "-c", "echo PORT=$MASTER_PORT"});
  EXPECT_EQ(rc, 0) << out;
  std::smatch ma, mb;
  const std::string oa = a.out();
  ASSERT_TRUE(std::regex_search(oa, ma, std::regex("PORT=(\\d+)"))) << oa;
  ASSERT_TRUE(std::regex_search(out, mb, std::regex("PORT=(\\d+)"))) << out;
  EXPECT_NE(ma[1], mb[1]);
  EXPECT_NE(ma[1], "29500");
  ::kill(a.pid(), SIGTERM);
  EXPECT_EQ(a.Wait(), 128 + SIGTERM);
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


// The Python that runs a script's workers, with a `python3` first on PATH that is the wrong one
// (as an activated environment other than the one meant, or a stale shim).
class PythonChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_ + "/bin/python3", "#!/bin/sh\necho WRONG_PYTHON; exit 3\n", 0755);
    WriteFile(dir_ + "/which.py", "import sys\nprint('EXE=' + sys.executable)\n", 0644);
    path_ = dir_ + "/bin:" + std::string(std::getenv("PATH"));
  }
  static void WriteFile(const std::string& path, const std::string& text, mode_t mode) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
  }
  // Runs argv with PYTHON_EXEC unset (the test command sets it) and the wrong python3 first.
  std::pair<int, std::string> Run(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
    argv.insert(argv.begin(), {"/usr/bin/env", "-u", "PYTHON_EXEC"});
    env["PATH"] = path_;
    return RunToEnd(argv, env);
  }
  std::string dir_, path_;
};

TEST_F(PythonChoiceTest, PythonFlagNamesTheInterpreter) {
  auto [rc, out] = Run({DtrunBinary(), "--python", "/usr/bin/python3.11", dir_ + "/which.py"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("EXE=/usr/bin/python3.11"), std::string::npos) << out;
}

TEST_F(PythonChoiceTest, PythonDashMDtrunRunsWorkersUnderThatPython) {
  // As `python -m torch.distributed.run`: the interpreter it runs under, not python3 on PATH.
  auto [rc, out] = Run({"/usr/bin/python3.11", "-m", "dtrun", "--nproc-per-node", "2", dir_ + "/which.py"},
                       {{"PYTHONPATH", BinDir() + "/../lib/dtrun/python"}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n') >= 2, true) << out;
  EXPECT_NE(out.find("EXE=/usr/bin/python3.11"), std::string::npos) << out;
  EXPECT_EQ(out.find("WRONG_PYTHON"), std::string::npos) << out;
}

TEST_F(PythonChoiceTest, AFailedJobNamesTheInterpreterItsWorkersRan) {
  auto [rc, out] = Run({DtrunBinary(), dir_ + "/which.py"});
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("WRONG_PYTHON"), std::string::npos) << out;
  EXPECT_NE(out.find("the workers' Python was " + dir_ + "/bin/python3 (python3 on PATH); another (a venv's "
                     "bin/python): --python PATH or PYTHON_EXEC"),
            std::string::npos)
      << out;
}


// Newer torchrun's flags and variables, as workers and callers see them.
TEST(TorchrunParityTest, VirtualLocalRankGivesEachWorkerItsOneDeviceAsLocalRankZero) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "--virtual-local-rank", "/bin/sh", "-c",
                             "echo RANK=$RANK LOCAL=$LOCAL_RANK DEV=$CUDA_VISIBLE_DEVICES"},
                            {{"CUDA_VISIBLE_DEVICES", "3,5"}});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("RANK=0 LOCAL=0 DEV=3"), std::string::npos) << out;
  EXPECT_NE(out.find("RANK=1 LOCAL=0 DEV=5"), std::string::npos) << out;
}

TEST(TorchrunParityTest, AFailedJobsRootCauseGoesToTheLaunchersOwnErrorFile) {
  const std::string file = MakeTempDir() + "/launcher_error.json";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--nproc-per-node", "2", "/bin/sh", "-c", "[ $RANK = 1 ] && exit 7; exit 0"},
                            {{"TORCHELASTIC_ERROR_FILE", file}});
  EXPECT_EQ(rc, 7) << out;
  const std::string json = ReadText(file);
  EXPECT_NE(json.find("\"errorCode\": 7"), std::string::npos) << json;
  EXPECT_NE(json.find("rank 1 on "), std::string::npos) << json;
  EXPECT_NE(json.find("exited with code 7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"py_callstack\""), std::string::npos) << json;
}

TEST(TorchrunParityTest, LoglevelWarningSilencesDtrunsInfoLines) {
  std::vector<std::string> argv = {DtrunBinary(), "--nproc-per-node", "auto", "/bin/true"};
  auto [rc, out] = RunToEnd(argv);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--nproc-per-node auto: "), std::string::npos) << out;
  auto [qrc, quiet] = RunToEnd(argv, {{"LOGLEVEL", "WARNING"}});
  EXPECT_EQ(qrc, 0) << quiet;
  EXPECT_EQ(quiet.find("--nproc-per-node auto: "), std::string::npos) << quiet;
}

TEST(TorchrunParityTest, ABracketedIpv6MasterAddressReachesWorkersWithoutBrackets) {
  auto [rc, out] = RunToEnd({DtrunBinary(), "--master-addr", "[::1]", "--master-port", "0", "/bin/sh", "-c",
                             "echo ADDR=$MASTER_ADDR"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("ADDR=::1\n"), std::string::npos) << out;
}


// Python callers of torch's launch API, pointed at dtrun's: the same script gets the same results.
class PythonLaunchApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> py = TorchPython();
    if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
    py_ = *py;
  }
  std::pair<int, std::string> Run(std::vector<std::string> argv) {
    argv.insert(argv.begin(), py_);
    return RunToEnd(argv, {{"PYTHONPATH", BinDir() + "/../lib/dtrun/python"}});
  }
  std::string py_;
};

TEST_F(PythonLaunchApiTest, ElasticLaunchReturnsEveryRanksValueAndRaisesChildFailedError) {
  auto [rc, out] = Run({Worker("elastic_launch_caller.py"), "dtrun"});
  EXPECT_EQ(rc, 0) << out;
  // Gloo all-reduce of 1 + 2 across the two ranks, times the argument 10, from each rank.
  EXPECT_NE(out.find("RESULTS [(0, 0, 30.0), (1, 1, 30.0)]"), std::string::npos) << out;
  // torch's own exception type, naming the root cause's message.
  EXPECT_NE(out.find("CHILD FAILED torch.distributed.elastic.multiprocessing.errors True"), std::string::npos) << out;
  EXPECT_NE(out.find("dtrun._entry FAILED"), std::string::npos) << out;  // dtrun's failure summary
}

TEST_F(PythonLaunchApiTest, PatchedTorchrunRunsAnInProcessWrappersWorkersUnderDtrun) {
  auto [rc, out] = Run({Worker("torchrun_in_process.py")});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("WORKER 0 of 2 dtrun=yes"), std::string::npos) << out;
  EXPECT_NE(out.find("WORKER 1 of 2 dtrun=yes"), std::string::npos) << out;
}

// --numa-binding exclusive on this machine's own topology: each worker gets cores of its own, and
// keeps them in the round after a restart.
TEST(LaunchTest, NumaBindingExclusiveGivesEachWorkerItsOwnCoresInEveryRound) {
  // Rank 1 fails the first round, but only once rank 0 has said its CPUs (through a FIFO).
  const std::string fifo = MakeTempDir() + "/rank0-spoke";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string script =
      "say() { echo \"L=$LOCAL_RANK R=$TORCHELASTIC_RESTART_COUNT $(grep Cpus_allowed_list /proc/self/status)\"; }; "
      "case $LOCAL_RANK$TORCHELASTIC_RESTART_COUNT in "
      "00) say; echo > " +
      fifo +
      ";; "
      "10) timeout 60 sh -c 'read x < " +
      fifo +
      "'; say; exit 1;; "
      "*) say;; esac";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--numa-binding", "exclusive",
                             "--max-restarts", "1", "/bin/sh", "-c", script});
  if (rc != 0 && out.find("physical core for 2 workers") != std::string::npos) {
    GTEST_SKIP() << "this machine lets the test use one physical core: " << out;
  }
  ASSERT_EQ(rc, 0) << out;
  const std::regex line(R"(L=(\d) R=(\d) Cpus_allowed_list:\s*(\S+))");
  std::map<std::string, std::string> cpus;  // "<local rank>/<round>" -> its CPU list
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    cpus[(*it)[1].str() + "/" + (*it)[2].str()] = (*it)[3].str();
  }
  ASSERT_EQ(cpus.size(), 4u) << out;
  EXPECT_NE(cpus["0/0"], cpus["1/0"]) << out;
  EXPECT_EQ(cpus["0/1"], cpus["0/0"]) << out;
  EXPECT_EQ(cpus["1/1"], cpus["1/0"]) << out;
  // What dtrun said it would do is what the workers got.
  EXPECT_NE(out.find("local rank 1 on CPUs " + cpus["1/0"] + " ("), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
