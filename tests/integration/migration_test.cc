// The checkable claims of docs/MIGRATING.md: a torch.multiprocessing.spawn script converted as
// the guide says trains exactly as before; a torch.distributed.launch-era script runs unchanged
// with --append-local-rank; running the trainer again with the same output dir continues where
// it stopped (a "state directory", as SageMaker-style jobs keep one).
#include <filesystem>
#include <regex>

#include "gtest/gtest.h"
#include "tests/support/loopback.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

std::string Migrate(const std::string& script) { return Worker("migrate/" + script); }

// Every "rank R of W: parameter checksum C" line's checksum; they must agree across ranks.
std::vector<std::string> Checksums(const std::string& out) {
  std::vector<std::string> sums;
  std::regex line(R"(rank \d+ of \d+: parameter checksum (-?[0-9.]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    sums.push_back((*it)[1]);
  }
  return sums;
}

TEST(MigrationTest, AnMpSpawnScriptConvertedForDtrunTrainsExactlyAsBefore) {
  std::optional<std::string> python = TorchPython();
  if (!python) GTEST_SKIP() << "no Python with torch (set PYTHON_EXEC)";
  int port = 0;
  { ListenOnFreeLoopbackPort(port); }  // a port that was just free, for the hand-set MASTER_PORT
  auto [rc_before, before] = RunToEnd({*python, Migrate("spawn_before.py"), "-n", "1", "-g", "2", "-nr", "0"},
                                      {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}});
  ASSERT_EQ(rc_before, 0) << before;
  auto [rc_after, after] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", Migrate("spawn_after.py")},
                                    {{"PYTHON_EXEC", *python}});
  ASSERT_EQ(rc_after, 0) << after;
  const std::vector<std::string> b = Checksums(before), a = Checksums(after);
  ASSERT_EQ(b.size(), 2u) << before;
  ASSERT_EQ(a.size(), 2u) << after;
  EXPECT_EQ(b[0], b[1]);
  EXPECT_EQ(a[0], a[1]);
  EXPECT_EQ(a[0], b[0]) << "the converted script must train exactly as the spawned one\n" << before << after;
  EXPECT_NE(after.find("[default0]:epoch 2 loss"), std::string::npos) << after;
}

TEST(MigrationTest, ATorchDistributedLaunchScriptRunsUnchangedWithAppendLocalRank) {
  std::optional<std::string> python = TorchPython();
  if (!python) GTEST_SKIP() << "no Python with torch (set PYTHON_EXEC)";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--append-local-rank",
                             "--local-rank-flag=--local_rank", Migrate("launch_era.py")},
                            {{"PYTHON_EXEC", *python}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default0]:local_rank argument 0"), std::string::npos) << out;
  EXPECT_NE(out.find("[default1]:local_rank argument 1"), std::string::npos) << out;
  const std::vector<std::string> sums = Checksums(out);
  ASSERT_EQ(sums.size(), 2u) << out;
  EXPECT_EQ(sums[0], sums[1]);
}

TEST(MigrationTest, RunningTheTrainerAgainWithTheSameOutputDirContinuesWhereItStopped) {
  if (!std::filesystem::exists(BinDir() + "/train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string data = MakeDemoDataset({"--train-per-class", "24", "--val-per-class", "8", "--size", "64"});
  const std::string state = MakeTempDir() + "/state";
  auto run = [&](const std::string& epochs) {
    return RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", BinDir() + "/train_imagenet", data,
                     "-b", "16", "--lr", "0.02", "--image-size", "64", "-j", "1", "-p", "4", "--epochs", epochs,
                     "--output-dir", state});
  };
  // 240 images / 2 ranks / 16 = 8 optimizer steps an epoch.
  auto [rc1, first] = run("1");
  ASSERT_EQ(rc1, 0) << first;
  EXPECT_NE(first.find("8 optimizer steps"), std::string::npos) << first;
  // The same command with more epochs: it resumes from the newest checkpoint in the state dir.
  auto [rc2, second] = run("2");
  ASSERT_EQ(rc2, 0) << second;
  EXPECT_NE(second.find("resuming from"), std::string::npos) << second;
  EXPECT_EQ(second.find("Epoch: [0]"), std::string::npos) << "epoch 0 ran again\n" << second;
  EXPECT_NE(second.find("16 optimizer steps"), std::string::npos) << second;
}

}  // namespace
}  // namespace dtrun::testing
