// Warm workers (docs/DESIGN.md, "Warm workers"): once a round trains, the agent starts the next
// attempt's workers and parks them; a restart releases them with the round's environment instead
// of spawning. A parked worker that dies turns warm starts off and restarts go on cold. Uses small
// workers (tests/integration/workers/warm_probe.cc and warm_probe.py), so it runs without LibTorch.
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "base/process_table.h"
#include "gtest/gtest.h"
#include "tests/support/file_events.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {
namespace {

std::vector<std::string> Job(const std::string& dir, const std::vector<std::string>& probe_args) {
  std::vector<std::string> argv = {DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                   "--event-log", dir + "/events.jsonl", BinDir() + "/warm_probe"};
  argv.insert(argv.end(), probe_args.begin(), probe_args.end());
  return argv;
}

// round -> the worker_start records' (pid, warm) pairs.
std::map<int64_t, std::vector<std::pair<int64_t, bool>>> Starts(const std::string& dir) {
  std::map<int64_t, std::vector<std::pair<int64_t, bool>>> by_round;
  for (const nlohmann::json& r : EventsOfKind(dir + "/events.jsonl", "worker_start")) {
    by_round[r["round"].get<int64_t>()].emplace_back(r["worker_pid"].get<int64_t>(), r["warm"].get<bool>());
  }
  return by_round;
}

TEST(WarmWorkersTest, ARestartReleasesTheParkedWorkersWithTheRoundsEnvironment) {
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {}));
  ASSERT_TRUE(job.WaitForOutput("started and parked", std::chrono::seconds(60))) << job.all();
  const pid_t victim = WorkerOf(job.pid(), 1);  // a running worker, not a parked one
  ASSERT_GT(victim, 0) << job.all();
  ::kill(victim, SIGKILL);
  ASSERT_EQ(job.Wait(std::chrono::seconds(60)), 0) << job.all();

  std::map<int64_t, std::vector<std::pair<int64_t, bool>>> starts = Starts(dir);
  ASSERT_EQ(starts[0].size(), 2u);
  ASSERT_EQ(starts[1].size(), 2u) << job.all();
  for (const auto& [pid, warm] : starts[0]) EXPECT_FALSE(warm);
  for (const auto& [pid, warm] : starts[1]) {
    EXPECT_TRUE(warm);
    EXPECT_NE(pid, starts[0][0].first);
    EXPECT_NE(pid, starts[0][1].first);
    // Released into round 1: the round's environment, not the one it was parked with, and no
    // park pipe left.
    const std::regex line("probe rank=[01] restart=1 pid=" + std::to_string(pid) + " park_fd=unset launch=(\\S+)");
    EXPECT_TRUE(std::regex_search(job.out(), line)) << job.all();
  }
  // The workers parked for a round that never came ended with the job.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(job.out(), m, std::regex("launch=(\\S+)")));
  EXPECT_TRUE(FindProcessesWithEnv("DTRUN_LAUNCH_ID", m[1].str()).empty());
}

TEST(WarmWorkersTest, AParkedWorkerThatDiesTurnsWarmStartsOffAndRestartsGoOnCold) {
  const std::string dir = MakeTempDir();
  Harness job(Job(dir, {"die-parked"}));
  ASSERT_TRUE(job.WaitForOutput("ended before a round needed it (exit code 3)", std::chrono::seconds(60)))
      << job.all();
  const pid_t victim = WorkerOf(job.pid(), 1);
  ASSERT_GT(victim, 0) << job.all();
  ::kill(victim, SIGKILL);
  ASSERT_EQ(job.Wait(std::chrono::seconds(60)), 0) << job.all();
  std::map<int64_t, std::vector<std::pair<int64_t, bool>>> starts = Starts(dir);
  ASSERT_EQ(starts[1].size(), 2u) << job.all();
  for (const auto& [pid, warm] : starts[1]) EXPECT_FALSE(warm);
  EXPECT_NE(job.all().find("probe rank=1 restart=1"), std::string::npos) << job.all();
  // Said once, not once per parked worker.
  const std::string all = job.all();
  EXPECT_EQ(all.find("ended before a round needed it"), all.rfind("ended before a round needed it")) << all;
}

TEST(WarmWorkersTest, APythonScriptThatAwaitsItsRoundIsParkedAndReleasedWarm) {
  const std::string dir = MakeTempDir();
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "2", "--event-log",
               dir + "/events.jsonl", Worker("warm_probe.py"), "2"});
  ASSERT_TRUE(job.WaitForOutput("started and parked", std::chrono::seconds(60))) << job.all();
  const pid_t first = WorkerOf(job.pid(), 1);
  ASSERT_GT(first, 0) << job.all();
  ::kill(first, SIGKILL);
  ASSERT_TRUE(job.WaitForOutput("pyprobe rank=1 restart=1", std::chrono::seconds(60))) << job.all();

  std::smatch m;
  const std::string out = job.out();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(pyprobe rank=1 restart=1 pid=(\d+) park_fd=(\w+) environ_park=(\w+))")))
      << job.all();
  const pid_t released = std::stoi(m[1]);
  EXPECT_EQ(m[2], "unset");  // the round's environment, no park pipe in it
  EXPECT_EQ(m[3], "no");     // and /proc/PID/environ no longer reads as parked
  // Tools that skip parked workers find it as the running rank 1.
  EXPECT_EQ(WorkerOf(job.pid(), 1), released);
  ::kill(released, SIGKILL);
  ASSERT_EQ(job.Wait(std::chrono::seconds(60)), 0) << job.all();

  std::map<int64_t, std::vector<std::pair<int64_t, bool>>> starts = Starts(dir);
  ASSERT_EQ(starts[1].size(), 2u) << job.all();
  for (const auto& [pid, warm] : starts[1]) EXPECT_TRUE(warm) << job.all();
  EXPECT_TRUE(std::any_of(starts[1].begin(), starts[1].end(), [&](const auto& s) { return s.first == released; }));
}

// A parked script may start processes of its own before its round (a pyenv shim's subshells did,
// and an import may): they are in its process group, not strays of the round that ends meanwhile.
// Before, the agent's sweep for strays killed them (a shim's subshell killed mid-way under load).
TEST(WarmWorkersTest, WhatAParkedScriptStartedIsNoStrayOfTheRoundThatEnds) {
  const std::string dir = MakeTempDir();
  const std::string marks = dir + "/parked";
  ASSERT_EQ(::mkdir(marks.c_str(), 0700), 0);
  Harness job({DtrunBinary(), "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--event-log",
               dir + "/events.jsonl", Worker("warm_probe.py"), "1", marks});
  auto parked = [&] {
    int n = 0;
    for (const auto& entry : std::filesystem::directory_iterator(marks))
      n += entry.path().filename().string().rfind("parked-", 0) == 0;
    return n;
  };
  // Both parked workers have their `sleep` started and are waiting for their round.
  ASSERT_TRUE(AwaitFiles(
      {marks}, [&] { return parked() == 2; }, std::chrono::seconds(60)))
      << job.all();
  ASSERT_TRUE(job.WaitForOutput("pyprobe rank=1 restart=0", std::chrono::seconds(60))) << job.all();
  const pid_t running = WorkerOf(job.pid(), 1);
  ASSERT_GT(running, 0) << job.all();
  ::kill(running, SIGKILL);
  ASSERT_EQ(job.Wait(std::chrono::seconds(60)), 0) << job.all();

  const std::string out = job.out();
  for (int rank : {0, 1}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        out, m, std::regex("pyprobe rank=" + std::to_string(rank) + R"( restart=1 pid=\d+ .* child=(\w+))")))
        << job.all();
    EXPECT_EQ(m[1], "alive") << "rank " << rank << "\n" << job.all();
  }
  EXPECT_EQ(job.all().find("leftover process"), std::string::npos) << job.all();
  std::map<int64_t, std::vector<std::pair<int64_t, bool>>> starts = Starts(dir);
  ASSERT_EQ(starts[1].size(), 2u) << job.all();
  for (const auto& [pid, warm] : starts[1]) EXPECT_TRUE(warm) << job.all();
}

}  // namespace
}  // namespace dtrun::testing
