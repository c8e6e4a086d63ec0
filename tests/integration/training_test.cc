// The trainer under dtrun: 2 DDP processes learn, a killed worker resumes from the checkpoint with
// exactly the planned number of optimizer steps, and DDP matches single-process training.
#include <signal.h>

#include <filesystem>
#include <regex>

#include "base/exit_codes.h"
#include "base/process_table.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/metrics_schema.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

std::vector<std::string> Train(const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinDir() + "/train_imagenet", TinyImageDataset(), "-b", "16", "--lr", "0.02",
                                   "--warmup-epochs", "1", "--lr-schedule", "cosine", "--image-size", "64", "-j",
                                   "1", "--output-dir", out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

TEST(TrainingTest, TwoProcessesLearnFarAboveChance) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
  const std::string run = MakeTempDir() + "/run";
  for (auto& a : Train(run, {"--epochs", "6", "-p", "100"})) argv.push_back(a);
  auto [rc, out] = RunToEnd(argv);
  ASSERT_EQ(rc, 0) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("best val top1 ([0-9.]+)%"))) << out;
  EXPECT_GT(std::stod(m[1]), 25.0) << out;  // chance is 10%
  // dtplot's learning curves hold the six validations, the best of them the one the log names.
  auto [prc, plot_out] = RunToEnd({BinDir() + "/dtplot", run, "--data-json", run + "/plot.json"});
  ASSERT_EQ(prc, 0) << plot_out;
  EXPECT_GT(std::filesystem::file_size(run + "/learning_curves.png"), 10000u);
  nlohmann::json val = nlohmann::json::parse(ReadText(run + "/plot.json"))["learning_curves"]["Top-1 accuracy"]["val"];
  ASSERT_EQ(val.size(), 6u) << val.dump();
  double best = 0;
  for (const nlohmann::json& point : val) best = std::max(best, point[1].get<double>());
  EXPECT_NEAR(best, std::stod(m[1]), 0.01);
}

TEST(TrainingTest, KilledWorkerResumesFromTheCheckpointWithExactlyThePlannedSteps) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1"};
  // 240 images / 2 ranks / 16 = 8 steps per epoch; 2 epochs = 16 steps. Checkpoint every step.
  for (auto& a : Train(MakeTempDir() + "/run", {"--epochs", "2", "-p", "1", "--save-every-minutes", "0"})) {
    argv.push_back(a);
  }
  Harness job(argv);
  ASSERT_TRUE(job.WaitForOutput("Epoch: [1][3/8]", std::chrono::seconds(120))) << job.all();
  const pid_t victim = WorkerOf(job.pid(), 1);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(job.Wait(std::chrono::seconds(180)), 0) << job.all();
  EXPECT_NE(job.all().find("resuming from"), std::string::npos) << job.all();
  EXPECT_NE(job.all().find("16 optimizer steps"), std::string::npos) << job.all();
}

// Slurm's warning before preemption (sbatch --signal=USR1@120) reaches the workers through dtrun
// (under Slurm it forwards SIGUSR1 by default; here the flag says so): they checkpoint at the next
// step and exit. The requeued run, same command, resumes there and ends with exactly the planned
// optimizer steps.
TEST(TrainingTest, APreemptionWarningCheckpointsAndTheRequeuedRunResumesExactly) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--signals-to-handle",
                                   "SIGTERM,SIGINT,SIGUSR1"};
  for (auto& a : Train(MakeTempDir() + "/run", {"--epochs", "2", "-p", "1", "--save-every-minutes", "1000"})) {
    argv.push_back(a);
  }
  Harness first(argv);
  ASSERT_TRUE(first.WaitForOutput("Epoch: [0][3/8]", std::chrono::seconds(120))) << first.all();
  ::kill(first.pid(), SIGUSR1);
  EXPECT_EQ(first.Wait(std::chrono::seconds(120)), 128 + SIGUSR1) << first.all();
  EXPECT_NE(first.all().find("stop requested (User defined signal 1): checkpoint written at epoch 0"),
            std::string::npos) << first.all();
  auto [rc, out] = RunToEnd(argv);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("resuming from"), std::string::npos) << out;
  EXPECT_NE(out.find("16 optimizer steps"), std::string::npos) << out;
}

// The trainer reports every step (heartbeats with the global step) and its sections: the agent's
// event log has each worker's last step, and an absurd eval timeout catches the first eval.
TEST(TrainingTest, TheTrainerReportsItsStepsAndSectionsToTheAgent) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--event-log",
                                   dir + "/events.jsonl", "--heartbeat-timeout", "120"};
  for (auto& a : Train(dir + "/run", {"--epochs", "2", "-p", "100"})) argv.push_back(a);
  auto [rc, out] = RunToEnd(argv);
  ASSERT_EQ(rc, 0) << out;
  std::vector<nlohmann::json> exits = EventsOfKind(dir + "/events.jsonl", "worker_exit");
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) EXPECT_EQ(e["last_step"], 16) << e;  // 2 epochs of 8 steps

  std::vector<std::string> hung = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--event-log",
                                   dir + "/hang.jsonl", "--section-timeout", "eval=0.001"};
  for (auto& a : Train(dir + "/run2", {"--epochs", "2", "-p", "100"})) hung.push_back(a);
  auto [rc2, out2] = RunToEnd(hung);
  EXPECT_EQ(rc2, kHangExitCode) << out2;
  std::vector<nlohmann::json> hangs = EventsOfKind(dir + "/hang.jsonl", "hang");
  ASSERT_EQ(hangs.size(), 1u) << out2;
  EXPECT_EQ(hangs[0]["section"], "eval");
  EXPECT_EQ(hangs[0]["step"], 8);  // after the first epoch
}

TEST(TrainingTest, DdpMatchesSingleProcessTrainingOnTheUnion) {
  if (!BinaryBuilt("ddp_equivalence_worker")) GTEST_SKIP() << "built without LibTorch";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", BinDir() + "/ddp_equivalence_worker"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("DDP_EQUIVALENT rank=0"), std::string::npos) << out;
  EXPECT_NE(out.find("DDP_EQUIVALENT rank=1"), std::string::npos) << out;
  EXPECT_NE(out.find("SYNC_BN_EQUIVALENT rank=0"), std::string::npos) << out;
  EXPECT_NE(out.find("SYNC_BN_EQUIVALENT rank=1"), std::string::npos) << out;
}

TEST(TrainingTest, ProgressiveResizingWithSyncBatchNormChangesSizeAndBatchByEpochAndWritesTensorBoard) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  std::string out_dir = MakeTempDir() + "/run";
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
  for (auto& a : Train(out_dir, {"--epochs", "3", "-p", "100", "--size-schedule", "0:48:16,2:64:8", "--sync-bn"})) {
    argv.push_back(a);
  }
  auto [rc, out] = RunToEnd(argv);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("SyncBatchNorm"), std::string::npos) << out;
  EXPECT_NE(out.find("epoch 2: image size 64, batch 8 per process"), std::string::npos) << out;
  // 120 samples per rank: 2 epochs × ceil(120/16) + 1 epoch × ceil(120/8) = 16 + 15.
  EXPECT_NE(out.find("31 optimizer steps"), std::string::npos) << out;
  bool has_events = false;
  for (auto& e : std::filesystem::directory_iterator(out_dir + "/tb")) {
    has_events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && e.file_size() > 100;
  }
  EXPECT_TRUE(has_events);
  ExpectMetricsFollowSchema(out_dir + "/metrics.jsonl");
}

TEST(TrainingTest, BadFlagsAndMissingDataAreOneLineErrors) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  auto [rc1, out1] = RunToEnd({BinDir() + "/train_imagenet", "--synthetic", "--arch", "resnet7"});
  EXPECT_EQ(rc1, 2);
  EXPECT_NE(out1.find("unknown --arch resnet7"), std::string::npos) << out1;
  auto [rc2, out2] = RunToEnd({BinDir() + "/train_imagenet", "/nonexistent/data", "--epochs", "1"});
  EXPECT_EQ(rc2, 2);
  EXPECT_NE(out2.find("does not exist"), std::string::npos) << out2;
}

// A C++ trainer's error reaches the summary through torchelastic's error file, as a Python
// script's does through @record: the message, the file it came from, and the restart line's reason.
TEST(TrainingTest, TheTrainersErrorReachesTheSummaryThroughItsErrorFile) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "1", "--max-restarts", "1",
                             BinDir() + "/train_imagenet", "--synthetic", "--resume", "/nonexistent.pt"});
  EXPECT_EQ(rc, 2) << out;
  const size_t at = out.find("Root Cause");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string root = out.substr(at);
  EXPECT_NE(root.find("traceback : --resume /nonexistent.pt: no such checkpoint file"), std::string::npos) << out;
  EXPECT_EQ(root.find("error_file: <N/A>"), std::string::npos) << out;
  EXPECT_NE(root.find("error_file: /"), std::string::npos) << out;
  EXPECT_NE(out.find("failed (exit code 2: --resume /nonexistent.pt: no such checkpoint file"), std::string::npos)
      << out;
}

// A short 2-rank run of train_imagenet under dtrun with the test fault DTRUN_FAULT_KILL=`fault`.
std::pair<int, std::string> RunWithFault(const std::string& fault) {
  return RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", BinDir() + "/train_imagenet", "--synthetic",
                   "--synthetic-size", "256", "-b", "16", "--image-size", "32", "--epochs", "1", "-j", "1",
                   "--output-dir", MakeTempDir() + "/out"},
                  {{"DTRUN_FAULT_KILL", fault}});
}

// A trainer that dies of a fatal signal says where, as faulthandler does for Python: the summary
// has the function and its callers, the restart line names it, and the exit is still the signal's.
TEST(TrainingTest, ASegfaultingTrainerNamesWhereItHappenedInTheSummary) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  auto [rc, out] = RunWithFault("1:3:segv");
  EXPECT_EQ(rc, 128 + SIGSEGV) << out;
  const size_t at = out.find("Root Cause");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string root = out.substr(at);
  EXPECT_NE(root.find("exitcode  : -11"), std::string::npos) << out;
  EXPECT_NE(root.find("traceback : Fatal signal: SIGSEGV at address 0x10 in "
                      "dtrun::worker::(anonymous namespace)::WriteThroughABadPointer()\n"
                      "Stack (most recent call first):\n"),
            std::string::npos)
      << out;
  EXPECT_NE(root.find(" dtrun::worker::KillIfPlanned()\n"), std::string::npos) << out;
  EXPECT_EQ(root.find("Signal 11 (SIGSEGV) received by PID"), std::string::npos) << out;
}

// An exception out of one rank's step: the summary names that rank and the exception as Python
// names its last line, from the error file the trainer writes, whatever its peer then did (its
// all-reduce with the rank that is gone fails too, or dtrun stops it first).
TEST(TrainingTest, AnExceptionInOneRanksStepIsTheRootCauseWithItsType) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  auto [rc, out] = RunWithFault("1:3:throw");
  EXPECT_EQ(rc, 1) << out;
  const size_t at = out.find("Root Cause");
  ASSERT_NE(at, std::string::npos) << out;
  const std::string root = out.substr(at);
  EXPECT_NE(root.find("rank      : 1 (local_rank: 1)"), std::string::npos) << out;
  EXPECT_NE(root.find("traceback : std::runtime_error: test fault: bad batch after step 3\n"), std::string::npos)
      << out;
  EXPECT_EQ(root.find("error_file: <N/A>"), std::string::npos) << out;
}

// Values that crashed (SIGFPE), trained "successfully" on nothing, or failed deep inside
// LibTorch: each is now exit 2 with the flag named, and nothing is written.
TEST(TrainingTest, EveryOutOfRangeFlagIsRefusedBeforeAnythingIsWritten) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"-b", "0"}, "--batch-size"},          {{"-p", "0"}, "--print-freq"},
      {{"-b", "-1"}, "--batch-size"},         {{"--epochs", "-1"}, "--epochs"},
      {{"--synthetic-size", "0"}, "--synthetic-size"}, {{"-j", "0"}, "--workers"},
      {{"--threads", "0"}, "--threads"},      {{"--collective-timeout", "0"}, "--collective-timeout"},
      {{"--collective-timeout", "-1"}, "--collective-timeout"}, {{"--num-classes", "-3"}, "--num-classes"},
      {{"--lr", "nan"}, "--lr"},              {{"--label-smoothing", "2"}, "--label-smoothing"},
      {{"--resume", "/nonexistent.pt"}, "--resume"}, {{"--dist-backend", "nccl"}, "--dist-backend nccl"},
      {{"--momentum", "1e300"}, "--momentum"}, {{"--image-size", "3"}, "--image-size"},
      // A misspelt schedule used to mean "step", silently.
      {{"--lr-schedule", "cosin"}, "'cosin' is not one of step|cosine"}, {{"--amp", "fp32"}, "--amp"},
      {{"--overlap", "1"}, "--overlap"},
  };
  const std::string out = MakeTempDir() + "/out";
  for (const auto& [flags, named] : bad) {
    std::vector<std::string> argv = {BinDir() + "/train_imagenet", "--synthetic", "--output-dir", out};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto [rc, text] = RunToEnd(argv);
    EXPECT_EQ(rc, 2) << flags[0] << " " << flags[1] << ": " << text;
    EXPECT_NE(text.find(named), std::string::npos) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_FALSE(std::filesystem::exists(out)) << flags[0];
  }
  // The launcher's variables come from outside too: a RANK that is no number is not rank 0.
  auto [rc, text] = RunToEnd({BinDir() + "/train_imagenet", "--synthetic", "--output-dir", out},
                             {{"RANK", "1x"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("RANK=1x in the environment is not a whole number"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace dtrun::testing
