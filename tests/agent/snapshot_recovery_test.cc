// The in-memory recovery component (agent/snapshot_recovery.h) on a single node, under an injected
// clock: a recovery's phases come from the hooks and the workers' reports, in the event log and
// the job's summary line.
#include "agent/snapshot_recovery.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "snapshot/snapshot_region.h"
#include "tests/support/test_snapshots.h"

namespace dtrun {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

progress::Report Restored(const std::string& source, int64_t step) {
  progress::Report r;
  r.kind = progress::Report::Kind::kRestored;
  r.source = source;
  r.step = step;
  return r;
}

progress::Report Beat(int64_t step) {
  progress::Report r;
  r.kind = progress::Report::Kind::kBeat;
  r.step = step;
  return r;
}

progress::Report Snapshot(int64_t step, int64_t micros) {
  progress::Report r;
  r.kind = progress::Report::Kind::kSnapshot;
  r.step = step;
  r.micros = micros;
  return r;
}

// A complete snapshot in a worker's region, as the worker writes it.
void WriteSnapshot(int fd, int rank, int64_t step) {
  snapshot::SlotHeader h;
  h.rank = rank;
  h.world_size = 2;
  h.step = step;
  testing::WriteTestSnapshot(fd, h, "state");
}

class SnapshotRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dtrun-snaprec-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    dir_ = dir;
    events_ = EventLog({dir_ + "/events.jsonl"}, "run", "host");
    options_.nproc_per_node = 2;
    options_.snapshot_bytes_per_worker = 1 << 20;
    options_.now = [this] { return now_; };
    loop_ = *EventLoop::Create(options_.now);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::vector<nlohmann::json> Records(const std::string& event) {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir_ + "/events.jsonl");
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      if (j["event"] == event) out.push_back(j);
    }
    return out;
  }

  std::string dir_;
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  AgentOptions options_;
  EventLog events_;
  std::unique_ptr<EventLoop> loop_;
};

TEST_F(SnapshotRecoveryTest, ARecoverysPhasesComeFromTheHooksAndReportsOnTheInjectedClock) {
  SnapshotRecovery r(*loop_, events_, options_);
  r.Start(std::nullopt);
  ASSERT_TRUE(r.enabled());
  EXPECT_FALSE(r.AllRanksSnapshotted());  // regions made, nothing written yet
  rdzv::Assignment a;
  a.round = 1;
  EXPECT_TRUE(r.ReadyFor(a));  // no buddy copies to wait for
  r.RoundStarted(0);
  r.OnReport(0, Beat(20));  // no failure yet: nothing to follow
  EXPECT_FALSE(r.recovering());

  const Clock::time_point t0 = now_;
  r.OnFailure(20);
  r.OnFailure(99);  // the same recovery: the first call counts
  EXPECT_TRUE(r.recovering());
  now_ = t0 + milliseconds(120);
  r.GroupExited();
  now_ = t0 + milliseconds(130);
  r.RoundStarted(1);
  now_ = t0 + milliseconds(400);
  r.OnReport(0, Restored("memory", 19));
  r.OnReport(1, Restored("memory", 19));
  now_ = t0 + milliseconds(700);
  r.OnReport(0, Beat(20));
  EXPECT_TRUE(r.recovering());  // rank 1 has not stepped yet
  now_ = t0 + milliseconds(750);
  r.OnReport(1, Beat(20));
  EXPECT_FALSE(r.recovering());

  std::vector<nlohmann::json> recovered = Records("recovered");
  ASSERT_EQ(recovered.size(), 1u);
  EXPECT_EQ(recovered[0]["round"], 1);
  EXPECT_EQ(recovered[0]["source"], "memory");
  EXPECT_EQ(recovered[0]["restored_step"], 19);
  EXPECT_EQ(recovered[0]["lost_steps"], 1);
  EXPECT_EQ(recovered[0]["stopped_ms"], 120);
  EXPECT_EQ(recovered[0]["started_ms"], 130);
  EXPECT_EQ(recovered[0]["restored_ms"], 400);
  EXPECT_EQ(recovered[0]["stepping_ms"], 750);
  EXPECT_EQ(Records("state_restored").size(), 2u);
  EXPECT_NE(r.Summary().find("recoveries on this node: 1 (memory 1); 1 step(s) of work lost"), std::string::npos)
      << r.Summary();
}

// After a failure the workers have only their last step to keep: the stop waits 0.5 s, or twice
// the slowest write a worker reported when that is longer, once every rank holds a snapshot, and
// never longer than --shutdown-timeout, whatever a worker claims.
TEST_F(SnapshotRecoveryTest, TheStopGraceCoversTheSlowestSnapshotWriteOnceEveryRankHoldsOne) {
  const milliseconds timeout(30000);
  SnapshotRecovery r(*loop_, events_, options_);
  r.Start(std::nullopt);
  ASSERT_TRUE(r.enabled());
  EXPECT_EQ(r.StopGrace(timeout), timeout);  // nothing kept yet: the whole timeout
  WriteSnapshot(r.store().fd(0), 0, 5);
  EXPECT_EQ(r.StopGrace(timeout), timeout);  // rank 1 holds nothing
  WriteSnapshot(r.store().fd(1), 1, 5);
  EXPECT_EQ(r.StopGrace(timeout), milliseconds(500));
  r.OnReport(0, Snapshot(5, 240'000));  // a write under 0.25 s changes nothing
  EXPECT_EQ(r.StopGrace(timeout), milliseconds(500));
  r.OnReport(1, Snapshot(5, 1'200'000));  // a large state: 1.2 s a write
  r.OnReport(0, Snapshot(10, 30'000));    // the slowest write counts, not the newest
  EXPECT_EQ(r.StopGrace(timeout), milliseconds(2400));
  EXPECT_EQ(r.StopGrace(milliseconds(1000)), milliseconds(1000));
  r.OnReport(1, Snapshot(10, int64_t{1} << 62));  // a hostile figure
  EXPECT_EQ(r.StopGrace(timeout), timeout);
}

TEST_F(SnapshotRecoveryTest, WithoutMemoryForSnapshotsItIsOffAndRoundsStartAtOnce) {
  options_.snapshot_bytes_per_worker = 0;
  SnapshotRecovery r(*loop_, events_, options_);
  r.Start(std::nullopt);
  EXPECT_FALSE(r.enabled());
  EXPECT_FALSE(r.AllRanksSnapshotted());  // the stop grace stays --shutdown-timeout
  WorkerGroup::Io io;
  r.AddRegionsTo(io);
  EXPECT_TRUE(io.snapshot_fds.empty());
  rdzv::Assignment a;
  EXPECT_TRUE(r.ReadyFor(a));
}

// --snapshot-dir through the component: a job that ends unfinished keeps its regions' snapshots;
// the next agent's first round waits for them to be loaded (the loader's eventfd wakes the loop)
// and finds them under its own run; a job that succeeds removes them.
TEST_F(SnapshotRecoveryTest, AnUnfinishedJobsSnapshotsAreKeptAndTheNextAgentsFirstRoundWaitsForThem) {
  options_.snapshot_dir = dir_ + "/kept";
  options_.snapshot_dir_every = milliseconds(0);  // only at the end: no copies thread here
  rdzv::Assignment a;
  a.round = 0;
  a.world_size = 2;
  auto ready = [&](SnapshotRecovery& r) {
    for (int wakes = 0; wakes < 10 && !r.ReadyFor(a); ++wakes) loop_->RunOnce(now_ + std::chrono::seconds(30));
    return r.ReadyFor(a);
  };
  options_.run_id = "first";
  {
    SnapshotRecovery r(*loop_, events_, options_);
    r.Start(std::nullopt);
    EXPECT_FALSE(r.ReadyFor(a));  // its own load, of nothing, runs first
    ASSERT_TRUE(ready(r));
    for (int lr = 0; lr < 2; ++lr) {
      testing::WriteTestSnapshot(r.store().fd(lr), snapshot::SlotHeader{snapshot::JobHash("first"), lr, 2, 5, 0, 0, 0, 0},
                                 "state");
    }
    r.OnJobEnd(SnapshotRecovery::JobEnd::kStopped);
  }
  ASSERT_EQ(Records("snapshots_kept").size(), 1u);
  EXPECT_EQ(Records("snapshots_kept")[0]["ranks"], 2);

  options_.run_id = "second";
  SnapshotRecovery next(*loop_, events_, options_);
  next.Start(std::nullopt);
  EXPECT_FALSE(next.ReadyFor(a));
  ASSERT_TRUE(ready(next));
  for (int lr = 0; lr < 2; ++lr) {
    ASSERT_TRUE(next.store().Newest(lr).has_value()) << lr;
    EXPECT_EQ(next.store().Newest(lr)->step, 5);
    EXPECT_EQ(next.store().Newest(lr)->job, snapshot::JobHash("second"));
  }
  ASSERT_EQ(Records("snapshots_loaded").size(), 1u);
  EXPECT_EQ(Records("snapshots_loaded")[0]["steps"], nlohmann::json::array({5}));
  next.OnJobEnd(SnapshotRecovery::JobEnd::kSucceeded);
  EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/kept"));
}

// A run that loaded kept snapshots and failed before any newer one (a program changed since, its
// model no longer fits the state) keeps the same state and is told how to start afresh; one that
// got past it, or was stopped, is not.
TEST_F(SnapshotRecoveryTest, ARunThatFailsOnTheStateItLoadedIsToldHowToStartAfresh) {
  options_.snapshot_dir = dir_ + "/kept";
  options_.snapshot_dir_every = milliseconds(0);
  rdzv::Assignment a;
  a.round = 0;
  a.world_size = 2;
  // step -2: the workers emptied their regions (no snapshot left to keep).
  auto run = [&](const std::string& id, int64_t step, SnapshotRecovery::JobEnd end) {
    options_.run_id = id;
    SnapshotRecovery r(*loop_, events_, options_);
    r.Start(std::nullopt);
    for (int wakes = 0; wakes < 10 && !r.ReadyFor(a); ++wakes) loop_->RunOnce(now_ + std::chrono::seconds(30));
    ASSERT_TRUE(r.ReadyFor(a));
    if (step >= 0) {
      testing::WriteTestSnapshot(r.store().fd(0), snapshot::SlotHeader{snapshot::JobHash(id), 0, 2, step, 0, 0, 0, 0},
                                 "state");
    }
    for (int lr = 0; step == -2 && lr < 2; ++lr) {
      absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(r.store().fd(lr));
      ASSERT_TRUE(region.ok()) << region.status();
      for (int slot = 0; slot < snapshot::kSlots; ++slot) region->Invalidate(slot);
    }
    r.OnJobEnd(end);
  };
  using End = SnapshotRecovery::JobEnd;
  run("first", 5, End::kFailed);  // loaded nothing
  run("second", -1, End::kStopped);
  run("third", -1, End::kFailed);
  run("fourth", 6, End::kFailed);
  run("fifth", -2, End::kFailed);  // nothing kept: the files still hold step 6
  const std::vector<nlohmann::json> kept = Records("snapshots_kept");
  ASSERT_EQ(kept.size(), 5u);
  EXPECT_FALSE(kept[0].contains("failed_at_loaded_step"));
  EXPECT_FALSE(kept[1].contains("failed_at_loaded_step"));
  EXPECT_EQ(kept[2]["failed_at_loaded_step"], 5);
  EXPECT_FALSE(kept[3].contains("failed_at_loaded_step"));
  EXPECT_EQ(kept[4]["ranks"], 0);
  EXPECT_EQ(kept[4]["failed_at_loaded_step"], 6);
}

}  // namespace
}  // namespace dtrun
