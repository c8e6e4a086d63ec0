// Recovery from in-memory snapshots (docs/DESIGN.md, "Snapshots"): a worker killed mid-epoch
// resumes from the snapshot its agent holds, at most one step back, and ends with parameters bit
// for bit equal to an uninterrupted run's; a snapshot damaged in the agent's memory is refused
// and the rank takes its peer's copy of the step (or, with peers off, the job falls back to the
// disk checkpoint). Deterministic CPU training (Gloo, fixed seeds).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"
#include "tests/support/suite_memo.h"

namespace dtrun::testing {
namespace {

// 240 images / 2 ranks / 16 = 8 steps per epoch; 2 epochs = 16 steps.
std::vector<std::string> Job(const std::string& dir, std::vector<std::string> dtrun_flags) {
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--event-log",
                                   dir + "/events.jsonl"};
  argv.insert(argv.end(), dtrun_flags.begin(), dtrun_flags.end());
  for (const std::string& a : {BinDir() + "/train_imagenet", TinyImageDataset(), std::string("-b"), std::string("16"),
                               std::string("--lr"), std::string("0.02"), std::string("--image-size"),
                               std::string("64"), std::string("-j"), std::string("1"), std::string("--epochs"),
                               std::string("2"), std::string("-p"), std::string("1"), std::string("--output-dir"),
                               dir + "/run"}) {
    argv.push_back(a);
  }
  return argv;
}

std::string ParameterDigest(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("16 optimizer steps, parameter digest ([0-9a-f]{16})"))) return "";
  return m[1];
}

// Returns once rank 0 logged step 11 (epoch 1,
// batch 3), with the pid of rank 1's worker.
pid_t StartAndReachStep11(Harness& job) {
  EXPECT_TRUE(job.WaitForOutput("Epoch: [1][3/8]", std::chrono::seconds(180))) << job.all();
  const pid_t rank1 = WorkerOf(job.pid(), 1);
  EXPECT_GT(rank1, 0);
  return rank1;
}

// One run for the whole suite (tests/support/suite_memo.h): each test is a process of its own.
std::string UninterruptedDigest() {
  static const std::string digest = OncePerSuite("recovery_test.uninterrupted_digest", [] {
    auto [rc, out] = RunToEnd(Job(MakeTempDir(), {"--snapshot-memory", "0"}));
    EXPECT_EQ(rc, 0) << out;
    return ParameterDigest(out);
  });
  return digest;
}

// The `state_restored` record of `local_rank` in round `round` ({} if there is none): the
// ranks' records come in whatever order they finished.
nlohmann::json RestoredRecord(const std::vector<nlohmann::json>& records, int round, int local_rank) {
  for (const nlohmann::json& r : records) {
    if (r.value("round", -1) == round && r.value("local_rank", -1) == local_rank) return r;
  }
  return nlohmann::json::object();
}

TEST(RecoveryTest, AKilledWorkerResumesFromItsAgentsSnapshotBitForBit) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string expected = UninterruptedDigest();
  ASSERT_FALSE(expected.empty());
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {"--max-restarts", "1", "--snapshot-every", "1"}));
  const pid_t victim = StartAndReachStep11(job);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(job.Wait(std::chrono::seconds(180)), 0) << job.all();
  EXPECT_NE(job.all().find("resuming from the in-memory snapshot of step"), std::string::npos) << job.all();
  EXPECT_EQ(ParameterDigest(job.all()), expected) << job.all();
  // The event log has the recovery: where the state came from and what was lost.
  std::vector<nlohmann::json> recovered = EventsOfKind(dir + "/events.jsonl", "recovered");
  ASSERT_EQ(recovered.size(), 1u) << job.all();
  EXPECT_EQ(recovered[0]["source"], "memory");
  // Rank 0 finishing step 11 means rank 1 joined step 11's all-reduce, so its snapshot of step 10
  // was complete; that of step 11 may not be yet when the kill lands.
  EXPECT_GE(recovered[0]["restored_step"].get<int64_t>(), 10);
  EXPECT_LE(recovered[0]["lost_steps"].get<int64_t>(), 1) << recovered[0];
  EXPECT_LE(recovered[0]["stopped_ms"].get<int64_t>(), recovered[0]["stepping_ms"].get<int64_t>());
  std::vector<nlohmann::json> restored = EventsOfKind(dir + "/events.jsonl", "state_restored");
  ASSERT_EQ(restored.size(), 4u);  // both ranks of both attempts
  EXPECT_EQ(restored[0]["source"], "none");
  // Rank 1 restores its own snapshot, or rank 0's copy when the kill landed during its own.
  const nlohmann::json rank1 = RestoredRecord(restored, 1, 1);
  const std::string source = rank1.value("source", "");
  EXPECT_TRUE(source == "memory" || source == "peer") << rank1;
  // The second attempt's workers were parked ahead and released (warm workers): the bit-exact
  // resume above is theirs.
  std::vector<nlohmann::json> starts = EventsOfKind(dir + "/events.jsonl", "worker_start");
  ASSERT_EQ(starts.size(), 4u);
  EXPECT_FALSE(starts[0]["warm"].get<bool>());
  EXPECT_TRUE(starts[2]["warm"].get<bool>()) << starts[2];
  EXPECT_TRUE(starts[3]["warm"].get<bool>()) << starts[3];
}

// A job out of restarts (none allowed; rank 1 killed after step 11) keeps its ranks' snapshots in
// --snapshot-dir on its way out, rank 0's including the step it was armed with. The next run of
// the same command loads them before its workers start, resumes from memory instead of going back
// to the start (no disk checkpoint that late: one every 2 minutes), ends bit for bit as an
// uninterrupted run, and removes the files.
TEST(RecoveryTest, AJobOutOfRestartsKeepsItsSnapshotsAndTheNextRunResumesFromThemBitForBit) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string expected = UninterruptedDigest();
  ASSERT_FALSE(expected.empty());
  const std::string dir = MakeTempDir();
  const std::string kept = dir + "/kept";
  auto [failed_rc, failed] = RunToEnd(Job(dir, {"--snapshot-dir", kept, "--snapshot-every", "1"}),
                                      {{"DTRUN_FAULT_KILL", "1:11"}});
  ASSERT_NE(failed_rc, 0) << failed;
  EXPECT_NE(failed.find("rank 1: test fault: SIGKILL after step 11"), std::string::npos) << failed;
  EXPECT_NE(failed.find("[dtrun] kept 2 ranks' snapshots of steps "), std::string::npos) << failed;
  EXPECT_TRUE(std::filesystem::exists(kept + "/rank-0-of-2.dtsnap")) << failed;
  EXPECT_TRUE(std::filesystem::exists(kept + "/rank-1-of-2.dtsnap")) << failed;

  auto [rc, out] = RunToEnd(Job(dir, {"--snapshot-dir", kept}));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[dtrun] loaded 2 ranks' snapshots of steps "), std::string::npos) << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("resuming from the in-memory snapshot of step (\\d+)"))) << out;
  EXPECT_GE(std::stoi(m[1]), 10) << out;
  EXPECT_EQ(ParameterDigest(out), expected) << out;
  EXPECT_NE(out.find("[dtrun] the job finished: removed the 2 snapshot file(s) kept in " + kept), std::string::npos)
      << out;
  EXPECT_TRUE(std::filesystem::is_empty(kept));
  std::vector<nlohmann::json> loaded = EventsOfKind(dir + "/events.jsonl", "snapshots_loaded");
  ASSERT_EQ(loaded.size(), 1u) << out;
  EXPECT_EQ(loaded[0]["ranks"], 2) << loaded[0];
}

// The agent's region of local rank 1, opened through /proc as any process of this user could.
int OpenRegion(pid_t agent, int local_rank) {
  const std::string name = "/memfd:dtrun-snapshot-" + std::to_string(local_rank) + " (deleted)";
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(agent) + "/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() == name) return ::open(e.path().c_str(), O_RDWR);
  }
  return -1;
}

// Damages both slots of local rank 1's region and kills that rank (stopped first, so that it
// cannot write a fresh snapshot over the damage). Returns the job's output once it ended.
std::string CorruptRankOnesSnapshotsAndKillIt(Harness& job) {
  const pid_t victim = StartAndReachStep11(job);
  if (victim <= 0) return "";
  ::kill(victim, SIGSTOP);
  const int region = OpenRegion(job.pid(), 1);
  EXPECT_GE(region, 0);
  const off_t size = ::lseek(region, 0, SEEK_END);
  for (off_t slot : {off_t{0}, size / 2 / 4096 * 4096}) {
    const char garbage[8] = {'b', 'i', 't', 'r', 'o', 't', '!', '!'};
    EXPECT_EQ(::pwrite(region, garbage, sizeof(garbage), slot + 4096 + 200), 8);
  }
  ::close(region);
  ::kill(victim, SIGKILL);
  EXPECT_EQ(job.Wait(std::chrono::seconds(180)), 0) << job.all();
  return job.all();
}

// The damaged rank's state is that of rank 0 at the same step (the ranks of a data-parallel job
// are replicas): it receives rank 0's copy, and the run ends bit for bit as if uninterrupted.
TEST(RecoveryTest, ASnapshotCorruptedInMemoryIsRefusedAndTheRankReceivesItsPeersCopy) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string expected = UninterruptedDigest();
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {"--max-restarts", "1", "--snapshot-every", "1"}));
  const std::string out = CorruptRankOnesSnapshotsAndKillIt(job);
  EXPECT_NE(out.find("fails its checksum: corrupted in memory"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 holds no in-memory snapshot of step"), std::string::npos) << out;
  EXPECT_NE(out.find("receiving rank 0's copy"), std::string::npos) << out;
  EXPECT_NE(out.find("resuming from the in-memory snapshot of step"), std::string::npos) << out;
  EXPECT_EQ(ParameterDigest(out), expected) << out;
  std::vector<nlohmann::json> restored = EventsOfKind(dir + "/events.jsonl", "state_restored");
  ASSERT_EQ(restored.size(), 4u) << out;
  EXPECT_EQ(RestoredRecord(restored, 1, 1).value("source", ""), "peer") << out;
  EXPECT_EQ(RestoredRecord(restored, 1, 0).value("source", ""), "memory") << out;
}

// With DTRUN_SNAPSHOT_PEERS=off (ranks that are not replicas) no rank takes another's copy: the
// step that every rank holds is gone, and the job falls back to the disk checkpoint.
TEST(RecoveryTest, WithPeersOffACorruptedSnapshotFallsBackToTheDiskCheckpoint) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string expected = UninterruptedDigest();
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {"--max-restarts", "1", "--snapshot-every", "1"}), {{"DTRUN_SNAPSHOT_PEERS", "off"}});
  const std::string out = CorruptRankOnesSnapshotsAndKillIt(job);
  EXPECT_NE(out.find("fails its checksum: corrupted in memory"), std::string::npos) << out;
  EXPECT_NE(out.find("resuming from " + dir + "/run/checkpoints/checkpoint-000001-000000000.pt"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("resuming from the in-memory snapshot"), std::string::npos) << out;
  EXPECT_EQ(ParameterDigest(out), expected) << out;
}

// Snapshots on failure (worker/memory_snapshot.h, Rescue): rank 1 dies after step 10, before the
// step's vote, with no periodic snapshot near (every 1000 steps). Ranks 0 and 2 are armed with
// step 10 and keep it on their way out (the vote's all-reduce fails when rank 1 is gone); the
// restart resumes at step 10, rank 1 from a survivor's copy, and loses no step. With
// DTRUN_SNAPSHOT_ON_FAILURE=off the same crash goes back further. Both end bit for bit as a clean run.
TEST(RecoveryTest, TheSurvivorsKeepTheStepTheyWereAtWhenARankDiesSoNoStepIsLost) {
  if (!BinaryBuilt("train_recsys")) GTEST_SKIP() << "built without LibTorch";
  const std::string dir = MakeTempDir();
  const std::string ratings = MakeRatings(120, 300);
  auto run = [&](const std::string& name, std::map<std::string, std::string> env) {
    return RunRecsysUnderDtrun(dir, ratings, name,
                               {"--snapshot-every", "1000", "--event-log", dir + "/" + name + ".jsonl"}, env);
  };
  auto [clean_rc, clean] = run("clean", {});
  ASSERT_EQ(clean_rc, 0) << clean;
  ASSERT_FALSE(StepsAndDigest(clean).empty()) << clean;

  auto [rc, log] = run("rescued", {{"DTRUN_FAULT_KILL", "1:10"}});
  ASSERT_EQ(rc, 0) << log;
  EXPECT_NE(log.find("rank 1: test fault: SIGKILL after step 10"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 0: kept the state of step 10 in memory on the way out"), std::string::npos) << log;
  EXPECT_NE(log.find("resuming from the in-memory snapshot of step 10 "), std::string::npos) << log;
  std::vector<nlohmann::json> recovered = EventsOfKind(dir + "/rescued.jsonl", "recovered");
  ASSERT_EQ(recovered.size(), 1u) << log;
  EXPECT_EQ(recovered[0]["restored_step"], 10) << recovered[0];
  EXPECT_EQ(recovered[0]["lost_steps"], 0) << recovered[0];
  EXPECT_EQ(StepsAndDigest(log), StepsAndDigest(clean)) << log;

  // Rank 1 dies in step 11, before its backward, while the survivors' snapshot of step 10 is still
  // being copied alongside that step (as a state on the GPU is by default) and commits only at its
  // end: the survivors finish the copy and keep it on their way out.
  auto [copying_rc, copying] =
      RunRecsysUnderDtrun(dir, ratings, "copying", {"--snapshot-every", "10", "--event-log", dir + "/copying.jsonl"},
                          {{"DTRUN_FAULT_KILL", "1:11:before-backward"}, {"DTRUN_SNAPSHOT_COPY", "background"}});
  ASSERT_EQ(copying_rc, 0) << copying;
  EXPECT_NE(copying.find("rank 1: test fault: SIGKILL before the backward of step 11"), std::string::npos) << copying;
  EXPECT_TRUE(std::regex_search(copying, std::regex("rank 0: kept the state of step 10 in memory on the way out "
                                                    "\\([0-9.]+ MB, its snapshot's copy finished")))
      << copying;
  recovered = EventsOfKind(dir + "/copying.jsonl", "recovered");
  ASSERT_EQ(recovered.size(), 1u) << copying;
  EXPECT_EQ(recovered[0]["restored_step"], 10) << recovered[0];
  EXPECT_EQ(recovered[0]["lost_steps"], 0) << recovered[0];
  EXPECT_EQ(StepsAndDigest(copying), StepsAndDigest(clean)) << copying;

  auto [off_rc, off] = run("off", {{"DTRUN_FAULT_KILL", "1:10"}, {"DTRUN_SNAPSHOT_ON_FAILURE", "off"}});
  ASSERT_EQ(off_rc, 0) << off;
  EXPECT_EQ(off.find("in memory on the way out"), std::string::npos) << off;
  EXPECT_EQ(off.find("resuming from the in-memory snapshot of step 10 "), std::string::npos) << off;
  EXPECT_EQ(StepsAndDigest(off), StepsAndDigest(clean)) << off;
}

// A frozen rank (SIGSTOP) throws nothing at its peer: rank 0 sits in a collective with it until
// the heartbeat timeout names the hang and the agent stops the workers with SIGTERM. Rank 0's
// stop-signal thread then keeps the state it holds and says `kept`, and the agent kills it at once
// instead of waiting out the stop grace (the `state_kept` record). With snapshots only every 1000
// steps, the job still loses no step and ends bit for bit as an uninterrupted run.
TEST(RecoveryTest, AFrozenRanksPeerKeepsItsStateOnTheStopSignalAndIsLetGoAtOnce) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string expected = UninterruptedDigest();
  ASSERT_FALSE(expected.empty());
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {"--max-restarts", "1", "--snapshot-every", "1000", "--heartbeat-timeout", "10"}));
  const pid_t victim = StartAndReachStep11(job);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGSTOP);
  EXPECT_EQ(job.Wait(std::chrono::seconds(240)), 0) << job.all();
  EXPECT_NE(job.all().find("rank 0: kept the state of step"), std::string::npos) << job.all();
  std::vector<nlohmann::json> kept = EventsOfKind(dir + "/events.jsonl", "state_kept");
  ASSERT_FALSE(kept.empty()) << job.all();
  EXPECT_EQ(kept[0]["rank"], 0) << kept[0];
  EXPECT_TRUE(kept[0]["stopping"].get<bool>()) << kept[0];
  std::vector<nlohmann::json> recovered = EventsOfKind(dir + "/events.jsonl", "recovered");
  ASSERT_EQ(recovered.size(), 1u) << job.all();
  EXPECT_EQ(recovered[0]["lost_steps"], 0) << recovered[0];
  EXPECT_EQ(recovered[0]["restored_step"], kept[0]["step"]) << recovered[0];
  EXPECT_EQ(ParameterDigest(job.all()), expected) << job.all();
}

// Where the step runs on GPUs in several processes, the ranks' vote after each step is read a
// step later and acted on then by every rank (DTRUN_STEP_VOTE=lagged, the default there;
// worker/step_agreement.h). Forced here on the CPU, the three runs below each end bit for bit as
// an uninterrupted run: with no fault, with a bit flipped in rank 1's parameters after step 9
// (still found, named and gone back past), and with rank 1 killed after step 11 (still resumed
// from memory). Three tests, not one: CTest runs them side by side.
// Runs the job with `env` and the vote read a step later, expects it to end as the uninterrupted
// run does, and returns its output.
std::string RunWithTheVoteReadAStepLater(std::map<std::string, std::string> env) {
  env["DTRUN_STEP_VOTE"] = "lagged";
  const std::string expected = UninterruptedDigest();
  EXPECT_FALSE(expected.empty());
  auto [rc, out] = RunToEnd(Job(MakeTempDir(), {"--max-restarts", "1", "--snapshot-every", "1"}), env);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(ParameterDigest(out), expected) << out;
  return out;
}

TEST(RecoveryTest, WithTheVoteReadAStepLaterACleanRunEndsBitForBitAsWithTheVoteReadAtOnce) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string out = RunWithTheVoteReadAStepLater({});
  EXPECT_NE(out.find("in the steps' all-reduce"), std::string::npos) << "snapshots compared:\n" << out;
}

TEST(RecoveryTest, WithTheVoteReadAStepLaterAFlippedBitIsFoundAndGoneBackPast) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string out = RunWithTheVoteReadAStepLater({{"DTRUN_FAULT_FLIP", "1:9:fc.weight:20"}});
  EXPECT_NE(out.find("rank 1: test fault: flipped bit 20 of fc.weight after step 9"), std::string::npos) << out;
  EXPECT_NE(out.find("the replicas diverged at step "), std::string::npos) << out;
  EXPECT_NE(out.find("resuming from the in-memory snapshot of step"), std::string::npos) << out;
}

TEST(RecoveryTest, WithTheVoteReadAStepLaterAKilledRankResumesFromMemory) {
  if (!BinaryBuilt("train_imagenet")) GTEST_SKIP() << "built without LibTorch";
  const std::string out = RunWithTheVoteReadAStepLater({{"DTRUN_FAULT_KILL", "1:11"}});
  EXPECT_NE(out.find("rank 1: test fault: SIGKILL after step 11"), std::string::npos) << out;
  EXPECT_NE(out.find("resuming from the in-memory snapshot of step"), std::string::npos) << out;
}

}  // namespace
}  // namespace dtrun::testing
