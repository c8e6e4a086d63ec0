// dtrun.snapshot() and dtrun.restore() (python/dtrun/_snapshots.py): a Python DDP script keeps its
// state in its agent's memory and a killed rank's job resumes from it, ending with parameters
// equal to an uninterrupted run's (Gloo on CPU, deterministic batches); the ranks that survive a
// failure keep their last step on the way out (snapshots on failure), so no step is lost; without
// snapshots the script starts fresh; a state over the cap is named and training goes on. The Python writer and
// the C++ reader agree on the slot header byte for byte.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "snapshot/snapshot_region.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_probe.h"
#include "tests/support/suite_memo.h"
#include "tests/support/test_snapshots.h"

namespace dtrun::testing {
namespace {

constexpr int kSteps = 40;
constexpr int kCrashAt = 23;

std::pair<int, std::string> RunScript(const std::string& py, std::vector<std::string> flags,
                                      std::vector<std::string> script_args, std::map<std::string, std::string> env = {},
                                      int ranks = 2) {
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", std::to_string(ranks)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(Worker("snapshot_resume.py"));
  argv.push_back(std::to_string(kSteps));
  argv.insert(argv.end(), script_args.begin(), script_args.end());
  env["PYTHON_EXEC"] = py;
  return RunToEnd(argv, env);
}

// Snapshots on failure off: what the periodic snapshots alone give.
const std::map<std::string, std::string> kOnFailureOff = {{"DTRUN_SNAPSHOT_ON_FAILURE", "off"}};

// The parameter digest every one of `ranks` ranks printed, which DDP keeps equal; "" unless all
// did and agree.
std::string EveryRanksDigest(const std::string& out, int ranks) {
  std::set<std::string> digests;
  for (int r = 0; r < ranks; ++r) {
    std::smatch m;
    const std::string rank = std::to_string(r);
    if (!std::regex_search(out, m, std::regex("\\[default" + rank + "\\]:DIGEST rank=" + rank + " ([0-9a-f]{16})"))) {
      return "";
    }
    digests.insert(m[1]);
  }
  return digests.size() == 1 ? *digests.begin() : "";
}

std::string BothRanksDigest(const std::string& out) { return EveryRanksDigest(out, 2); }

int RestoredStep(const std::string& out) {
  std::smatch m;
  return std::regex_search(out, m, std::regex(R"(\[default1\]:RESTORED step=(\d+))")) ? std::stoi(m[1]) : -1;
}

class PythonSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::optional<std::string> py = TorchPython();
    if (!py) GTEST_SKIP() << "no Python with torch (install python3-torch or set PYTHON_EXEC)";
    py_ = *py;
  }
  // One run for the whole suite (tests/support/suite_memo.h): each test is a process of its own.
  const std::string& Uninterrupted() {
    static const std::string digest = OncePerSuite("python_snapshot_test.uninterrupted_digest", [this] {
      auto [rc, out] = RunScript(py_, {}, {});
      EXPECT_EQ(rc, 0) << out;
      EXPECT_NE(out.find("[default1]:FRESH"), std::string::npos) << out;
      return BothRanksDigest(out);
    });
    return digest;
  }
  std::string py_;
};

// Rank 1 dies after step 23. Rank 0 keeps its state of step 23 on its way out (snapshots on
// failure, python/dtrun/_on_failure.py): the restart loses no step, rank 1 taking rank 0's copy.
TEST_F(PythonSnapshotTest, AKilledRanksPeerKeepsItsLastStepOnTheWayOutAndTheJobLosesNoStep) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--event-log", events},
                             {"--crash-at", std::to_string(kCrashAt)});
  ASSERT_EQ(rc, 0) << out;
  // Not necessarily at a line's start: the thread that keeps the state on SIGTERM may write while
  // the main thread prints the traceback of Gloo's error in pieces (seen under ASan).
  EXPECT_NE(out.find("rank 0: kept the state of step 23 in memory on the way out"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 holds no in-memory snapshot of step 23; receiving rank 0's copy"), std::string::npos)
      << out;
  EXPECT_EQ(RestoredStep(out), kCrashAt) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=23"), std::string::npos) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  std::vector<nlohmann::json> kept = EventsOfKind(events, "state_kept");
  ASSERT_EQ(kept.size(), 1u) << out;
  EXPECT_EQ(kept[0]["rank"], 0);
  EXPECT_EQ(kept[0]["step"], kCrashAt);
  std::vector<nlohmann::json> recovered = EventsOfKind(events, "recovered");
  ASSERT_EQ(recovered.size(), 1u) << out;
  EXPECT_EQ(recovered[0]["restored_step"], kCrashAt);
  EXPECT_EQ(recovered[0]["lost_steps"], 0);
}

// Keeping the state takes longer than the stop grace (0.5 s here: the periodic snapshots are
// small), as a large state's does on a busy machine. Rank 0 says `keeping` before it writes, and
// the agent waits for it (up to --shutdown-timeout) instead of killing it mid-write: the job still
// loses no step. Before, rank 0 was SIGKILLed after 0.5 s and the restart went back to step 20.
TEST_F(PythonSnapshotTest, APeerWhoseKeepingOutlastsTheStopGraceIsWaitedForAndLosesNoStep) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--event-log", events},
                             {"--crash-at", std::to_string(kCrashAt), "--slow-keep", "2"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rank 0: kept the state of step 23 in memory on the way out"), std::string::npos) << out;
  std::vector<nlohmann::json> kept = EventsOfKind(events, "state_kept");
  ASSERT_EQ(kept.size(), 1u) << out;
  EXPECT_EQ(kept[0]["rank"], 0);
  EXPECT_TRUE(kept[0]["stopping"].get<bool>()) << kept[0];
  EXPECT_EQ(RestoredStep(out), kCrashAt) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  std::vector<nlohmann::json> recovered = EventsOfKind(events, "recovered");
  ASSERT_EQ(recovered.size(), 1u) << out;
  EXPECT_EQ(recovered[0]["lost_steps"], 0) << recovered[0];
}

// A rank that stops reporting (frozen in Python after step 23) makes dtrun stop every rank: its
// peer, blocked in C++ in the next all-reduce where Python runs no handler, keeps its state from
// the SIGTERM on a thread of its own, and so does the frozen rank. Both resume at step 23.
TEST_F(PythonSnapshotTest, AFrozenRankAndItsBlockedPeerKeepTheirStateWhenDtrunStopsThem) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--heartbeat-timeout", "5",
                                   "--event-log", events},
                             {"--freeze-at", std::to_string(kCrashAt)});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("hang detected"), std::string::npos) << out;
  std::set<int> kept_by;
  for (const nlohmann::json& k : EventsOfKind(events, "state_kept")) {
    EXPECT_EQ(k["step"], kCrashAt) << k;
    kept_by.insert(k["rank"].get<int>());
  }
  EXPECT_EQ(kept_by, (std::set<int>{0, 1})) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=23"), std::string::npos) << out;
  EXPECT_NE(out.find("[default1]:RESTORED step=23"), std::string::npos) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
}

TEST_F(PythonSnapshotTest, AKilledRankResumesFromTheNewestCommonSnapshotWithTheSameParameters) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  // Every 5th step, snapshots on failure off: the crash after step 23 goes back to step 20 exactly.
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--event-log", events},
                             {"--crash-at", std::to_string(kCrashAt)}, kOnFailureOff);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(RestoredStep(out), 20) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=20"), std::string::npos) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  std::vector<nlohmann::json> recovered = EventsOfKind(events, "recovered");
  ASSERT_EQ(recovered.size(), 1u) << out;
  EXPECT_EQ(recovered[0]["source"], "memory");
  EXPECT_EQ(recovered[0]["restored_step"], 20);
  EXPECT_NE(out.find("from the in-memory snapshot of step 20"), std::string::npos) << out;
  EXPECT_NE(out.find("recoveries on this node: 1 (memory 1); "), std::string::npos)
      << out;  // the job's last line adds them up
}

// Four ranks, where a float's sum depends on the order Gloo adds the ranks' gradients in (with two,
// a + b = b + a). DDP re-buckets after a process's first step unless find_unused_parameters is set,
// so only with it does the restarted process add its first step in the order the run that never
// stopped did; then the resumed job ends with that run's parameters to the bit (docs/MIGRATING.md).
TEST_F(PythonSnapshotTest, FourRanksWhoseDdpKeepsItsBucketsResumeWithTheParametersOfARunNeverStopped) {
  auto [rc, uninterrupted] = RunScript(py_, {}, {"--find-unused"}, {}, 4);
  ASSERT_EQ(rc, 0) << uninterrupted;
  const std::string expected = EveryRanksDigest(uninterrupted, 4);
  ASSERT_FALSE(expected.empty()) << uninterrupted;
  auto [rc2, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5"},
                              {"--find-unused", "--crash-at", std::to_string(kCrashAt)}, kOnFailureOff, 4);
  ASSERT_EQ(rc2, 0) << out;
  EXPECT_EQ(RestoredStep(out), 20) << out;
  EXPECT_EQ(EveryRanksDigest(out, 4), expected) << out;
}

// --snapshot-dir across two runs: the first is out of restarts (none allowed) when rank 1 dies
// after step 23; rank 0 keeps step 23 on its way out, and dtrun keeps both ranks' snapshots in the
// directory. The next run of the script loads them, rank 1 takes rank 0's copy of step 23, and the
// job ends as an uninterrupted run: no step lost across the two runs. Its success removes the
// files, so a third run starts fresh.
TEST_F(PythonSnapshotTest, AJobOutOfRestartsResumesInItsNextRunFromTheSnapshotsItKept) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string kept = MakeTempDir() + "/kept";
  auto [failed_rc, failed] =
      RunScript(py_, {"--snapshot-dir", kept, "--snapshot-every", "5"}, {"--crash-at", std::to_string(kCrashAt)});
  ASSERT_NE(failed_rc, 0) << failed;
  EXPECT_NE(failed.find("[dtrun] kept 2 ranks' snapshots of steps 15, 20, 23 "), std::string::npos) << failed;

  auto [rc, out] = RunScript(py_, {"--snapshot-dir", kept}, {});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[dtrun] loaded 2 ranks' snapshots of steps 15, 20, 23 "), std::string::npos) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=23"), std::string::npos) << out;
  EXPECT_EQ(RestoredStep(out), kCrashAt) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  EXPECT_TRUE(std::filesystem::is_empty(kept)) << out;

  auto [fresh_rc, fresh] = RunScript(py_, {"--snapshot-dir", kept}, {});
  ASSERT_EQ(fresh_rc, 0) << fresh;
  EXPECT_NE(fresh.find("[default1]:FRESH"), std::string::npos) << fresh;
}

// The script changed between two runs with the same --snapshot-dir (a wider hidden layer): its
// load_state_dict fails on the kept state. dtrun names the way out (remove the files) and keeps
// the state as it was, so the unchanged script's next run still resumes at the kept step, with
// the parameters of a run never stopped.
TEST_F(PythonSnapshotTest, AChangedModelThatFailsOnTheKeptStateIsToldHowToStartAfreshAndLosesNothing) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string kept = MakeTempDir() + "/kept";
  auto [failed_rc, failed] =
      RunScript(py_, {"--snapshot-dir", kept, "--snapshot-every", "5"}, {"--crash-at", std::to_string(kCrashAt)});
  ASSERT_NE(failed_rc, 0) << failed;

  auto [changed_rc, changed] = RunScript(py_, {"--snapshot-dir", kept}, {"--hidden", "96"});
  ASSERT_NE(changed_rc, 0) << changed;
  EXPECT_NE(changed.find("size mismatch"), std::string::npos) << changed;  // the script's own error
  EXPECT_NE(changed.find("[dtrun] this run failed before any snapshot past step 23, the one it loaded from " + kept +
                         ": if the program or its model changed since the run that kept it, remove " + kept +
                         "/*.dtsnap to start afresh"),
            std::string::npos)
      << changed;

  auto [rc, out] = RunScript(py_, {"--snapshot-dir", kept}, {});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(RestoredStep(out), kCrashAt) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
}

// Preempted (SIGTERM to dtrun, as Slurm and Kubernetes send it) between periodic snapshots (every
// 50th step): the ranks keep the state of their last snapshot() call on the way out, dtrun keeps
// it in --snapshot-dir, and the next run resumes there: at most the step whose heartbeat came
// before its snapshot() call is lost, not the steps since the last periodic snapshot. It ends
// with the same parameters as a run that was never stopped.
TEST_F(PythonSnapshotTest, APreemptedScriptsNextRunResumesAtTheStepItWasStoppedAt) {
  const std::string dir = MakeTempDir();
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--snapshot-dir", dir + "/kept",
               "--snapshot-every", "50", "--event-log", dir + "/events.jsonl", Worker("snapshot_resume.py"),
               std::to_string(kSteps), "--first-attempt-runs-on"},
              env);
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  auto past_a_snapshot = [](const nlohmann::json& j) {
    const std::map<int, int64_t> steps = StepsByRank(j);
    return steps.size() == 2 &&
           std::all_of(steps.begin(), steps.end(), [](const auto& rank_step) { return rank_step.second > 60; });
  };
  ASSERT_TRUE(past_a_snapshot(AwaitStatus(ask, past_a_snapshot, std::chrono::seconds(120)))) << job.all();
  ::kill(job.pid(), SIGTERM);
  ASSERT_TRUE(job.Wait(std::chrono::seconds(60)).has_value()) << job.all();
  EXPECT_NE(job.all().find("[dtrun] kept 2 ranks' snapshots of steps "), std::string::npos) << job.all();
  int64_t last_step = 0;  // the furthest step a rank reported before it exited
  for (const nlohmann::json& e : EventsOfKind(dir + "/events.jsonl", "worker_exit")) {
    last_step = std::max(last_step, e["last_step"].get<int64_t>());
  }

  auto run = [&](std::vector<std::string> flags, int64_t steps) {
    std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(Worker("snapshot_resume.py"));
    argv.push_back(std::to_string(steps));
    return RunToEnd(argv, env);
  };
  auto [rc, out] = run({"--snapshot-dir", dir + "/kept"}, last_step + 10);
  ASSERT_EQ(rc, 0) << out;
  const int restored = RestoredStep(out);
  EXPECT_GE(restored, last_step - 1) << "last step reported: " << last_step << "\n" << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=" + std::to_string(restored)), std::string::npos) << out;
  auto [clean_rc, clean] = run({}, last_step + 10);
  ASSERT_EQ(clean_rc, 0) << clean;
  EXPECT_FALSE(BothRanksDigest(out).empty()) << out;
  EXPECT_EQ(BothRanksDigest(out), BothRanksDigest(clean)) << out << clean;
}

// Each rank's step in --snapshot-dir as `dtrun status --json` shows it (`kept_step`; -1: none).
std::map<int, int64_t> KeptByRank(const nlohmann::json& job) {
  std::map<int, int64_t> kept;
  for (const auto& node : job.value("nodes", nlohmann::json::array())) {
    for (const auto& r : node.value("ranks", nlohmann::json::array())) {
      if (r["rank"].is_number_integer()) {
        kept[r["rank"].get<int>()] = r["kept_step"].is_number_integer() ? r["kept_step"].get<int64_t>() : -1;
      }
    }
  }
  return kept;
}

// A job whose dtrun is SIGKILLed with it (a scheduler's kill after its grace, the OOM killer) has
// no moment to keep anything; the copies --snapshot-dir-every made while it ran are what its next
// run resumes from, with the same parameters as a run that was never stopped. `dtrun status`
// shows each rank's copied step (KEPT).
TEST_F(PythonSnapshotTest, AJobKilledWithItsLauncherResumesFromTheCopiesMadeWhileItRan) {
  const std::string kept = MakeTempDir() + "/kept";
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--snapshot-dir", kept, "--snapshot-dir-every",
               "0.2", "--snapshot-every", "20", Worker("snapshot_resume.py"), std::to_string(kSteps),
               "--first-attempt-runs-on"},
              env);
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  auto copied = [&](const nlohmann::json& status) {
    const std::map<int, int64_t> shown = KeptByRank(status);
    return shown.size() == 2 && shown.at(0) >= 40 && shown.at(1) >= 40;
  };
  const nlohmann::json status = AwaitStatus(ask, copied, std::chrono::seconds(120));
  ASSERT_TRUE(copied(status)) << status.dump() << job.all();
  // What status shows is on disk.
  EXPECT_GE(CopiedStep(kept + "/rank-0-of-2.dtsnap"), KeptByRank(status).at(0));
  EXPECT_GE(CopiedStep(kept + "/rank-1-of-2.dtsnap"), KeptByRank(status).at(1));
  ::kill(job.pid(), SIGKILL);
  ASSERT_TRUE(job.Wait(std::chrono::seconds(60)).has_value());
  EXPECT_EQ(job.all().find("[dtrun] kept"), std::string::npos) << job.all();
  const int64_t copy = std::max(CopiedStep(kept + "/rank-0-of-2.dtsnap"), CopiedStep(kept + "/rank-1-of-2.dtsnap"));

  auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(Worker("snapshot_resume.py"));
    argv.push_back(std::to_string(copy + 10));
    return RunToEnd(argv, env);
  };
  auto [rc, out] = run({"--snapshot-dir", kept});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(RestoredStep(out), copy) << out;
  auto [clean_rc, clean] = run({});
  ASSERT_EQ(clean_rc, 0) << clean;
  EXPECT_FALSE(BothRanksDigest(out).empty()) << out;
  EXPECT_EQ(BothRanksDigest(out), BothRanksDigest(clean)) << out << clean;
}

// `dtrun kill --run-id` from another shell, as a user ends a job by hand: dtrun keeps the ranks'
// state of the step they were at, and the next run resumes there.
TEST_F(PythonSnapshotTest, AJobEndedWithDtrunKillResumesInItsNextRunAtTheStepItWasAt) {
  const std::string kept = MakeTempDir() + "/kept";
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness job({DtrunBinary(), "--nproc-per-node", "2", "--master-port", "0", "--rdzv-id", "ended-by-hand",
               "--snapshot-dir", kept, "--snapshot-every", "50", Worker("snapshot_resume.py"), "10", "--fresh-runs-on",
               "--say-every", "20"},
              env);
  ASSERT_TRUE(job.WaitForOutput("STEP 60", std::chrono::seconds(120))) << job.all();
  auto [kill_rc, said] = RunToEnd({DtrunBinary(), "kill", "--run-id", "ended-by-hand"}, env);
  ASSERT_EQ(kill_rc, 0) << said;
  ASSERT_TRUE(job.Wait(std::chrono::seconds(60)).has_value()) << job.all();
  EXPECT_NE(job.all().find("[dtrun] kept 2 ranks' snapshots"), std::string::npos) << job.all();
  auto [rc, out] = RunScript(py_, {"--snapshot-dir", kept}, {});
  ASSERT_EQ(rc, 0) << out;
  // Past the periodic snapshot of step 50.
  EXPECT_GE(RestoredStep(out), 60) << out << "\nthe run ended by `dtrun kill`:\n" << job.all();
}

// The same job run again with more workers, then with fewer (the nodes Slurm gave it changed, or
// --nproc-per-node did): each run resumes from the state the world before it kept, on every rank
// (DDP ranks are replicas), and says which world took it; the files it supersedes go once it keeps
// its own, and the last run's success leaves the directory empty.
// A script that snapshots its epoch and batch and resumes with dtrun.ResumableSampler, as the
// module's docs show, killed mid-epoch: across both attempts every sample of every epoch is
// trained exactly once (DistributedSampler, shuffled), and the restart loads only what it trains.
TEST_F(PythonSnapshotTest, AnEpochResumedMidWayWithResumableSamplerTrainsEverySampleExactlyOnce) {
  constexpr int kEpochs = 2, kSamples = 96, kCrashStep = 17;  // 12 steps an epoch: epoch 1, batch 5
  auto [rc, out] = RunToEnd({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                             "--snapshot-every", "5", Worker("sampler_resume.py"), std::to_string(kEpochs),
                             "--crash-at", std::to_string(kCrashStep)},
                            {{"PYTHON_EXEC", py_}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=17 epoch=1 batch=5"), std::string::npos) << out;
  std::map<std::pair<int, int>, int> times;  // (epoch, sample) -> times trained
  const std::regex trained(R"(TRAINED epoch=(\d+) idx=([0-9,]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), trained), end; it != end; ++it) {
    std::stringstream idx((*it)[2].str());
    for (std::string i; std::getline(idx, i, ',');) ++times[{std::stoi((*it)[1]), std::stoi(i)}];
  }
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    for (int i = 0; i < kSamples; ++i) EXPECT_EQ((times[{epoch, i}]), 1) << "epoch " << epoch << " sample " << i;
  }
  EXPECT_EQ(times.size(), static_cast<size_t>(kEpochs * kSamples));
  // The restart: the 7 batches of epoch 1 and none of the 5 it skipped, 4 samples each.
  EXPECT_NE(out.find("[default1]:LOADED 28 TRAINED 28"), std::string::npos) << out;
}

TEST_F(PythonSnapshotTest, AJobRunAgainWithMoreThenFewerWorkersResumesEachTimeFromTheStateTheOtherWorldKept) {
  const std::string kept = MakeTempDir() + "/kept";
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  auto job = [&](int workers, const std::string& steps) {
    return std::make_unique<Harness>(
        std::vector<std::string>{DtrunBinary(), "--standalone", "--nproc-per-node", std::to_string(workers),
                                 "--snapshot-dir", kept, "--snapshot-every", "50", Worker("snapshot_resume.py"), steps,
                                 "--fresh-runs-on", "--say-every", "20"},
        env);
  };
  auto restored_on_every_rank = [](const std::string& out, int workers) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex(R"(\[default0\]:RESTORED step=(\d+))"))) return -1;
    for (int r = 1; r < workers; ++r) {
      const std::string line = "[default" + std::to_string(r) + "]:RESTORED step=" + m[1].str();
      if (out.find(line) == std::string::npos) return -1;
    }
    return std::stoi(m[1]);
  };
  auto two = job(2, "10");
  ASSERT_TRUE(two->WaitForOutput("STEP 60", std::chrono::seconds(120))) << two->all();
  ::kill(two->pid(), SIGTERM);
  ASSERT_TRUE(two->Wait(std::chrono::seconds(60)).has_value()) << two->all();
  ASSERT_NE(two->all().find("[dtrun] kept 2 ranks' snapshots"), std::string::npos) << two->all();

  auto three = job(3, "100000");  // trains on until stopped
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(three->WaitForOutput("[default" + std::to_string(r) + "]:RESTORED step=", std::chrono::seconds(120)))
        << three->all();
  }
  const int from_two = restored_on_every_rank(three->all(), 3);
  EXPECT_GE(from_two, 60) << three->all();  // as the world of 2 would have chosen: a rank printed STEP 60
  // Rank 2 had no rank of its own in the world of 2: it takes a holder's copy, so each old rank's
  // state is weighed once. Said on stderr, which may arrive after the RESTORED lines on stdout.
  EXPECT_TRUE(three->WaitForOutput("rank 2 holds no in-memory snapshot of step " + std::to_string(from_two),
                                   std::chrono::seconds(60)))
      << three->all();
  EXPECT_NE(three->all().find(" by a world of 2 ranks ("), std::string::npos) << three->all();
  // Also on stderr.
  EXPECT_TRUE(three->WaitForOutput("[default0]:dtrun: resuming from the in-memory snapshot of step " +
                                       std::to_string(from_two) + ", taken by a world of 2 ranks (now 3)",
                                   std::chrono::seconds(60)))
      << three->all();
  // Restored.resume_batch in this world, as if the steps were one epoch's batches: no sample skipped.
  // Rank 2 prints it after its RESTORED line, which may be after rank 0's line on stderr.
  EXPECT_TRUE(three->WaitForOutput("[default2]:RESCALED batch=" + std::to_string(from_two * 2 / 3),
                                   std::chrono::seconds(60)))
      << three->all();
  const std::string further = "STEP " + std::to_string((from_two / 20 + 2) * 20);
  ASSERT_TRUE(three->WaitForOutput(further, std::chrono::seconds(120))) << three->all();
  ::kill(three->pid(), SIGTERM);
  ASSERT_TRUE(three->Wait(std::chrono::seconds(60)).has_value()) << three->all();
  ASSERT_NE(three->all().find("[dtrun] kept 3 ranks' snapshots"), std::string::npos) << three->all();
  EXPECT_NE(three->all().find("removed 2 file(s) of another world size"), std::string::npos) << three->all();
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(kept)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"rank-0-of-3.dtsnap", "rank-1-of-3.dtsnap", "rank-2-of-3.dtsnap"}));

  auto one = job(1, "10");  // ends 10 steps after the step it resumes at
  ASSERT_EQ(one->Wait(std::chrono::seconds(120)), 0) << one->all();
  const int from_three = restored_on_every_rank(one->all(), 1);
  // Rank 0's own state: at the stop it may have been a step behind the rank that printed the line.
  EXPECT_GE(from_three, (from_two / 20 + 2) * 20 - 1) << one->all();
  EXPECT_NE(one->all().find("taken by a world of 3 ranks (now 1)"), std::string::npos) << one->all();
  EXPECT_NE(one->all().find("[default0]:RESCALED batch=" + std::to_string(from_three * 3)), std::string::npos)
      << one->all();
  EXPECT_TRUE(std::filesystem::is_empty(kept)) << one->all();
}

// A second job given the same --snapshot-dir while the first still runs (a sweep's copied
// command line): it neither resumes from the first job's copies nor replaces them, and says why
// with the fix; its success leaves them. The first job, stopped, keeps its own state there, and
// its next run resumes from it.
TEST_F(PythonSnapshotTest, ASecondJobGivenTheDirectoryOfOneStillRunningNeitherResumesFromItNorReplacesIt) {
  const std::string kept = MakeTempDir() + "/kept";
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness first({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--snapshot-dir", kept, "--snapshot-dir-every",
                 "0.2", "--snapshot-every", "20", Worker("snapshot_resume.py"), "10", "--fresh-runs-on"},
                env);
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  auto copied = [&](const nlohmann::json&) {
    return CopiedStep(kept + "/rank-0-of-2.dtsnap") >= 40 && CopiedStep(kept + "/rank-1-of-2.dtsnap") >= 40;
  };
  ASSERT_TRUE(copied(AwaitStatus(ask, copied, std::chrono::seconds(120)))) << first.all();

  auto [rc, second] = RunScript(py_, {"--snapshot-dir", kept, "--snapshot-dir-every", "0.2"}, {});
  ASSERT_EQ(rc, 0) << second;
  EXPECT_NE(second.find("[default1]:FRESH"), std::string::npos) << second;
  EXPECT_NE(second.find("[dtrun] the snapshots of ranks 0, 1 in " + kept + " are another run's, one running at the "
                        "same time as this one: two jobs share --snapshot-dir " + kept + "; give each job a directory "
                        "of its own (not loaded)"),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("(left there)"), std::string::npos) << second;
  EXPECT_GE(CopiedStep(kept + "/rank-0-of-2.dtsnap"), 40) << second;

  ::kill(first.pid(), SIGTERM);
  ASSERT_TRUE(first.Wait(std::chrono::seconds(60)).has_value()) << first.all();
  EXPECT_EQ(first.all().find("two jobs share"), std::string::npos) << first.all();
  EXPECT_NE(first.all().find("[dtrun] kept 2 ranks' snapshots"), std::string::npos) << first.all();
  auto [next_rc, next] = RunScript(py_, {"--snapshot-dir", kept}, {});
  ASSERT_EQ(next_rc, 0) << next;
  EXPECT_GE(RestoredStep(next), 40) << next;
}

// A script that calls nothing of dtrun's but snapshot() and restore() (no heartbeat): its steps
// are still reported, so the recovery is followed to the ranks stepping again and the steps lost
// are counted: rank 1 reported step 23 before it died (read before it is reaped), and the restart
// resumes from step 20 (every 5th step, snapshots on failure off).
TEST_F(PythonSnapshotTest, AScriptWithoutHeartbeatsGetsItsRecoveryAndTheStepsItLostCounted) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--event-log", events},
                             {"--crash-at", std::to_string(kCrashAt), "--no-heartbeat"}, kOnFailureOff);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  std::vector<nlohmann::json> recovered = EventsOfKind(events, "recovered");
  ASSERT_EQ(recovered.size(), 1u) << out;
  EXPECT_EQ(recovered[0]["restored_step"], 20) << recovered[0];
  EXPECT_EQ(recovered[0]["step_before"], kCrashAt) << recovered[0];
  EXPECT_EQ(recovered[0]["lost_steps"], kCrashAt - 20) << recovered[0];
  EXPECT_NE(out.find("from the in-memory snapshot of step 20; 3 step(s) of work lost"), std::string::npos) << out;
  int killed = 0;
  for (const nlohmann::json& e : EventsOfKind(events, "worker_exit")) {
    if (e["rank"] != 1 || e["signal"] != "SIGKILL") continue;
    ++killed;
    EXPECT_EQ(e["last_step"], kCrashAt) << e;
  }
  EXPECT_EQ(killed, 1) << out;
  EXPECT_EQ(out.find("which is not that worker of the running round"), std::string::npos) << out;
}

// Watched with --heartbeat-timeout, a script that reports nothing but its snapshots is alive as long
// as it calls dtrun.snapshot(). The snapshots themselves may be rarer than the timeout (a large
// state's cadence, here every 1000th step of 5 ms): before snapshot() reported its step, the gap
// after the first one was taken for a hang ("no progress report for 2.0 s"), and the job stopped.
TEST_F(PythonSnapshotTest, AScriptWithoutHeartbeatsIsNotTakenForHungBetweenRareSnapshots) {
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--heartbeat-timeout", "2",
               "--snapshot-every", "1000", Worker("snapshot_resume.py"), std::to_string(kSteps),
               "--first-attempt-runs-on", "--no-heartbeat"},
              env);
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  // Steps take at least 5 ms: step 2500 is over 12.5 s in, past two 5 s gaps between snapshots.
  auto all_past = [](const nlohmann::json& j) {
    const std::map<int, int64_t> steps = StepsByRank(j);
    return steps.size() == 2 &&
           std::all_of(steps.begin(), steps.end(), [](const auto& rank_step) { return rank_step.second >= 2500; });
  };
  const nlohmann::json status = AwaitStatus(ask, all_past, std::chrono::seconds(120));
  EXPECT_TRUE(all_past(status)) << status.dump();
  EXPECT_EQ(job.all().find("hang detected"), std::string::npos) << job.all();
  ::kill(job.pid(), SIGTERM);
  EXPECT_TRUE(job.Wait(std::chrono::seconds(60)).has_value());
  EXPECT_EQ(job.all().find("hang detected"), std::string::npos) << job.all();
}

// Rank 1 loses its snapshots with it (its slots emptied before the kill): it receives rank 0's
// copy of the newest periodic step (the ranks are replicas; snapshots on failure off) and the run
// ends as if uninterrupted.
TEST_F(PythonSnapshotTest, ARankThatLostItsSnapshotsReceivesItsPeersCopyWithTheSameParameters) {
  ASSERT_FALSE(Uninterrupted().empty());
  const std::string events = MakeTempDir() + "/events.jsonl";
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-every", "5", "--event-log", events},
                             {"--crash-at", std::to_string(kCrashAt), "--forget"}, kOnFailureOff);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("rank 1 holds no in-memory snapshot of step 20; receiving rank 0's copy"), std::string::npos)
      << out;
  EXPECT_EQ(RestoredStep(out), 20) << out;
  EXPECT_NE(out.find("[default0]:RESTORED step=20"), std::string::npos) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
  // The restart's two ranks (a fresh start sends none): rank 0 from its own copy, rank 1 from rank 0's.
  std::multiset<std::string> sources;
  for (const nlohmann::json& r : EventsOfKind(events, "state_restored")) sources.insert(r["source"].get<std::string>());
  EXPECT_EQ(sources, (std::multiset<std::string>{"memory", "peer"})) << out;
}

// A rank that received its peer's copy holds it as its own from then on, as the peer does: until
// its next snapshot it would otherwise hold nothing, and a second stop in that window (here the
// job stopped at its end, snapshots on failure off) would keep only the sender's state.
TEST_F(PythonSnapshotTest, ARankThatReceivedItsPeersCopyHoldsItAsItsOwnUntilItsNextSnapshot) {
  const std::string kept = MakeTempDir() + "/kept";
  std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  env.insert(kOnFailureOff.begin(), kOnFailureOff.end());
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--snapshot-every",
               "30", "--snapshot-dir", kept, Worker("snapshot_resume.py"), std::to_string(kSteps), "--crash-at", "33",
               "--forget", "--hold", "--no-heartbeat"},
              env);
  ASSERT_TRUE(job.WaitForOutput("[default0]:HOLDING", std::chrono::seconds(120))) << job.all();
  ASSERT_TRUE(job.WaitForOutput("[default1]:HOLDING", std::chrono::seconds(60))) << job.all();
  // On stderr, which may arrive after HOLDING on stdout.
  ASSERT_TRUE(job.WaitForOutput("rank 1 holds no in-memory snapshot of step 30; receiving rank 0's copy",
                                std::chrono::seconds(60)))
      << job.all();
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  auto both_hold_30 = [](const nlohmann::json& job) {
    std::vector<int64_t> steps;
    for (const nlohmann::json& r : job["nodes"][0]["ranks"]) {
      steps.push_back(r["snapshot_step"].is_null() ? -1 : r["snapshot_step"].get<int64_t>());
    }
    return steps == std::vector<int64_t>{30, 30};  // no snapshot since: the next is step 60
  };
  const nlohmann::json status = AwaitStatus(ask, both_hold_30);
  EXPECT_TRUE(both_hold_30(status)) << status.dump();
  ::kill(job.pid(), SIGTERM);
  ASSERT_TRUE(job.Wait(std::chrono::seconds(60)).has_value()) << job.all();
  EXPECT_NE(job.all().find("[dtrun] kept 2 ranks' snapshots of step 30"), std::string::npos) << job.all();
}

// With DTRUN_SNAPSHOT_PEERS=off no step is held by both ranks: the script starts afresh.
TEST_F(PythonSnapshotTest, WithPeersOffARankThatLostItsSnapshotsMakesTheScriptStartAfresh) {
  ASSERT_FALSE(Uninterrupted().empty());
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                   "--snapshot-every", "5", Worker("snapshot_resume.py"), std::to_string(kSteps),
                                   "--crash-at", std::to_string(kCrashAt), "--forget"};
  auto [rc, out] = RunToEnd(argv, {{"PYTHON_EXEC", py_}, {"DTRUN_SNAPSHOT_PEERS", "off"}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("receiving rank 0's copy"), std::string::npos) << out;
  EXPECT_EQ(RestoredStep(out), -1) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
}

TEST_F(PythonSnapshotTest, TheDefaultCadenceAlsoResumesFromMemory) {
  ASSERT_FALSE(Uninterrupted().empty());
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1"}, {"--crash-at", std::to_string(kCrashAt)});
  ASSERT_EQ(rc, 0) << out;
  // The first two steps are always kept; after that the measured cost sets how often.
  EXPECT_GE(RestoredStep(out), 1) << out;
  EXPECT_LE(RestoredStep(out), kCrashAt) << out;
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
}

TEST_F(PythonSnapshotTest, WithSnapshotsOffTheScriptStartsAfreshAndEndsTheSame) {
  ASSERT_FALSE(Uninterrupted().empty());
  auto [rc, out] = RunScript(py_, {"--max-restarts", "1", "--snapshot-memory", "0"},
                             {"--crash-at", std::to_string(kCrashAt)});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(RestoredStep(out), -1) << out;
  EXPECT_NE(out.find("round 1: worker rank 1"), std::string::npos) << out;  // it did crash
  EXPECT_EQ(BothRanksDigest(out), Uninterrupted()) << out;
}

TEST_F(PythonSnapshotTest, AStateOverTheCapIsNamedWithTheFixAndTrainingGoesOn) {
  // Two 1.1 MB tensors (weights and momentum) against half a MiB per slot.
  auto [rc, out] = RunScript(py_, {"--snapshot-memory", "1"}, {"--hidden", "8192"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("snapshot of step 1 not taken: the training state is over"), std::string::npos) << out;
  EXPECT_NE(out.find("raise dtrun --snapshot-memory"), std::string::npos) << out;
  EXPECT_FALSE(BothRanksDigest(out).empty()) << out;
}

// `dtrun status` shows each rank's newest snapshot, read from the agent's region, and its step,
// which a script without heartbeats reports through snapshot().
TEST_F(PythonSnapshotTest, StatusShowsEachRanksNewestSnapshotStepAndSize) {
  const std::map<std::string, std::string> env = {{"DTRUN_RUNTIME_DIR", MakeTempDir()}, {"PYTHON_EXEC", py_}};
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--snapshot-every", "5",
               Worker("snapshot_resume.py"), std::to_string(kSteps), "--hold", "--no-heartbeat"},
              env);
  ASSERT_TRUE(job.WaitForOutput("[default0]:HOLDING")) << job.all();
  ASSERT_TRUE(job.WaitForOutput("[default1]:HOLDING")) << job.all();
  auto ask = [&] { return ParseJsonLines(RunToEnd({DtrunBinary(), "status", "--json"}, env).second); };
  auto newest = [](const nlohmann::json& job, const char* field) {
    std::vector<int64_t> v;
    for (const nlohmann::json& r : job["nodes"][0]["ranks"]) v.push_back(r[field].is_null() ? -1 : r[field].get<int64_t>());
    return v;
  };
  // The status is rebuilt about once a second: wait for the one after the last snapshot.
  const nlohmann::json status = AwaitStatus(ask, [&](const nlohmann::json& job) {
    return newest(job, "snapshot_step") == std::vector<int64_t>{kSteps, kSteps};
  });
  EXPECT_EQ(newest(status, "snapshot_step"), (std::vector<int64_t>{kSteps, kSteps})) << status.dump();
  EXPECT_EQ(newest(status, "step"), (std::vector<int64_t>{kSteps, kSteps})) << status.dump();  // from snapshot()
  for (int64_t bytes : newest(status, "snapshot_bytes")) EXPECT_GT(bytes, 1000) << status.dump();
  auto [rc2, table] = RunToEnd({DtrunBinary(), "status"}, env);
  EXPECT_NE(table.find("SNAP_SIZE"), std::string::npos) << table;
  ::kill(job.pid(), SIGTERM);
  EXPECT_TRUE(job.Wait(std::chrono::seconds(30)).has_value());
}

// The Python writer's header and the C++ reader's, in both directions; a flipped byte is refused.
TEST_F(PythonSnapshotTest, SlotHeadersAreTheSameBytesInPythonAndCpp) {
  const snapshot::SlotHeader h{snapshot::JobHash("job-7"), 3, 8, 120, 2, 5000, 0x1234abcd5678ef00ull, 1700000000123};
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/cpp.bin", std::ios::binary) << snapshot::EncodeHeader(h);
  const std::string script = dir + "/headers.py";
  std::ofstream(script)
      << "import sys\n"
         "from dtrun import _snapshots as s\n"
         "cpp = open(sys.argv[1] + '/cpp.bin', 'rb').read()\n"
         "h = s.decode_header(cpp, 1 << 20)\n"
         "print('DECODED', h.job == s.job_hash('job-7'), h.rank, h.world_size, h.step, h.attempt,\n"
         "      h.payload_bytes, hex(h.payload_hash), h.unix_ms)\n"
         "open(sys.argv[1] + '/py.bin', 'wb').write(s.encode_header(h))\n"
         "bad = bytearray(cpp); bad[50] ^= 1\n"
         "try:\n"
         "    s.decode_header(bytes(bad), 1 << 20)\n"
         "except s.SnapshotError as e:\n"
         "    print('REFUSED', e)\n";
  auto [rc, out] = RunToEnd({py_, script, dir}, {{"PYTHONPATH", BinDir() + "/../lib/dtrun/python"}});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("DECODED True 3 8 120 2 5000 0x1234abcd5678ef00 1700000000123"), std::string::npos) << out;
  EXPECT_NE(out.find("REFUSED snapshot header checksum mismatch"), std::string::npos) << out;
  std::ifstream in(dir + "/py.bin", std::ios::binary);
  const std::string py_bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<snapshot::SlotHeader> back = snapshot::DecodeHeader(py_bytes, 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job, h.job);
  EXPECT_EQ(back->step, 120);
  EXPECT_EQ(back->payload_hash, h.payload_hash);
  EXPECT_EQ(py_bytes, snapshot::EncodeHeader(h).substr(0, py_bytes.size()));
}

}  // namespace
}  // namespace dtrun::testing
