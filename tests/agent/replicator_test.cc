// The agent's buddy copies without sockets: a fake buddy stands for the Replica service. The
// first snapshot of a round and those that cross a multiple of `every` travel, and a copy that
// does not get there goes again until it does.
#include "agent/replicator.h"

#include <poll.h>

#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "base/checked_mutex.h"
#include "base/env_names.h"
#include "gtest/gtest.h"
#include "snapshot/snapshot_region.h"
#include "tests/support/test_snapshots.h"

namespace dtrun {
namespace {

const uint64_t kJob = snapshot::JobHash("job");

// What the buddy saw, shared between the test and the channel the replicator owns.
struct BuddyLog {
  CheckedMutex mu;
  int failures_left ABSL_GUARDED_BY(mu) = 0;
  std::vector<int64_t> attempts ABSL_GUARDED_BY(mu);  // steps, in the order they were sent
  std::vector<std::string> kept ABSL_GUARDED_BY(mu);
  int fetches ABSL_GUARDED_BY(mu) = 0;

  bool AwaitKept(size_t n) {
    CheckedMutexLock lock(&mu);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return kept.size() >= n; };
    return mu.AwaitWithTimeout(enough, std::chrono::seconds(60));
  }
};

class FakeBuddy : public replica::BuddyChannel {
 public:
  explicit FakeBuddy(std::shared_ptr<BuddyLog> log) : log_(std::move(log)) {}
  absl::StatusOr<int64_t> Push(const snapshot::SlotHeader& header, const replica::SharedBytes& payload,
                               const std::function<bool(double)>& pace) override {
    if (!pace(0.001)) return absl::CancelledError("stopping");
    CheckedMutexLock lock(&log_->mu);
    log_->attempts.push_back(header.step);
    if (log_->failures_left > 0) {
      --log_->failures_left;
      return absl::UnavailableError("the buddy 10.0.0.2:1 is unreachable");
    }
    log_->kept.emplace_back(payload.bytes);
    return header.step;
  }
  absl::StatusOr<std::vector<replica::Copy>> Fetch(int64_t, int64_t, std::chrono::milliseconds) override {
    CheckedMutexLock lock(&log_->mu);
    ++log_->fetches;
    return std::vector<replica::Copy>{};
  }
  void Cancel() override {}

 private:
  std::shared_ptr<BuddyLog> log_;
};

// A buddy whose host went silent: a fetch waits until the channel is cancelled (a minute at most,
// where gRPC's connect would give up after 20 s).
struct SilentHost {
  CheckedMutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  int fetches ABSL_GUARDED_BY(mu) = 0;

  bool AwaitFetch() {
    CheckedMutexLock lock(&mu);
    auto asked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return fetches > 0; };
    return mu.AwaitWithTimeout(asked, std::chrono::seconds(60));
  }
};

class SilentBuddy : public replica::BuddyChannel {
 public:
  explicit SilentBuddy(std::shared_ptr<SilentHost> host) : host_(std::move(host)) {}
  absl::StatusOr<int64_t> Push(const snapshot::SlotHeader&, const replica::SharedBytes&,
                               const std::function<bool(double)>&) override {
    return absl::UnavailableError("silent");
  }
  absl::StatusOr<std::vector<replica::Copy>> Fetch(int64_t, int64_t, std::chrono::milliseconds) override {
    CheckedMutexLock lock(&host_->mu);
    ++host_->fetches;
    auto cancelled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(host_->mu) { return host_->cancelled; };
    host_->mu.AwaitWithTimeout(cancelled, std::chrono::seconds(60));
    return absl::CancelledError("cancelled");
  }
  void Cancel() override {
    CheckedMutexLock lock(&host_->mu);
    host_->cancelled = true;
  }

 private:
  std::shared_ptr<SilentHost> host_;
};

// Nodes that may hold copies, by host: what each holds of rank 0, or that it is unreachable.
struct Holders {
  CheckedMutex mu;
  std::map<std::string, std::vector<replica::Copy>> copies ABSL_GUARDED_BY(mu);
  std::set<std::string> unreachable ABSL_GUARDED_BY(mu);
  std::vector<std::string> asked ABSL_GUARDED_BY(mu);  // hosts, in the order they were asked
};

class HolderChannel : public replica::BuddyChannel {
 public:
  HolderChannel(std::shared_ptr<Holders> holders, std::string host)
      : holders_(std::move(holders)), host_(std::move(host)) {}
  absl::StatusOr<int64_t> Push(const snapshot::SlotHeader&, const replica::SharedBytes&,
                               const std::function<bool(double)>&) override {
    return absl::UnavailableError("not under test");
  }
  absl::StatusOr<std::vector<replica::Copy>> Fetch(int64_t, int64_t, std::chrono::milliseconds) override {
    CheckedMutexLock lock(&holders_->mu);
    holders_->asked.push_back(host_);
    if (holders_->unreachable.count(host_)) return absl::UnavailableError("failed to connect");
    return holders_->copies[host_];
  }
  void Cancel() override {}

 private:
  std::shared_ptr<Holders> holders_;
  const std::string host_;
};

// Rank 0's (of 2) snapshot of `step`, as a buddy keeps it.
replica::Copy CopyOf(int64_t step, const std::string& payload) {
  replica::Copy c;
  c.header.job = kJob;
  c.header.world_size = 2;
  c.header.step = step;
  c.header.payload_bytes = payload.size();
  c.header.payload_hash = snapshot::PayloadHash(payload.data(), payload.size());
  c.payload = payload;
  return c;
}

// Calls ReadyFor until it says the workers may start, waiting on the fetch's event as the agent's
// loop does.
void AwaitReady(Replicator& replicator, const rdzv::Assignment& a) {
  while (!replicator.ReadyFor(a)) {
    struct pollfd p = {replicator.event_fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 60000), 1) << "the fetch did not end";
    replicator.Drain();
  }
}

// Writes a snapshot of rank 0 (of 2) at `step` into the worker's region, as a worker would.
void WriteSnapshot(int fd, int64_t step, const std::string& payload) {
  snapshot::SlotHeader h;
  h.job = kJob;
  h.world_size = 2;
  h.step = step;
  testing::WriteTestSnapshot(fd, h, payload);
}

class ReplicatorTest : public ::testing::Test {
 protected:
  // A replicator of one local rank; with `holders`, every endpoint it connects to is one of them.
  void Start(int failures, std::shared_ptr<Holders> holders = nullptr) {
    {
      CheckedMutexLock lock(&log_->mu);
      log_->failures_left = failures;
    }
    absl::StatusOr<SnapshotStore> store = SnapshotStore::Create(1, 1 << 20, /*with_replicas=*/true);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::make_unique<SnapshotStore>(std::move(*store));
    BuddyReplication r = Replication();
    if (holders) {
      r.connect = [holders](const std::string& host, int) { return std::make_unique<HolderChannel>(holders, host); };
    }
    replicator_ = std::make_unique<Replicator>(std::move(r), *store_, kJob);
    ASSERT_TRUE(replicator_->ReadyFor(RoundOf(0, 2))) << "round 0 fetches nothing";
  }
  // Copies to the fake buddy, every 10 steps, unpaced.
  BuddyReplication Replication() {
    BuddyReplication r;
    r.connect = [log = log_](const std::string&, int) { return std::make_unique<FakeBuddy>(log); };
    r.every = 10;
    r.duty = 1.0;
    r.first_retry = std::chrono::milliseconds(10);
    return r;
  }
  // Round `round` of two nodes, `world_size` ranks in all; this node's buddy is the fake one.
  static rdzv::Assignment RoundOf(int64_t round, int world_size) {
    rdzv::Assignment a;
    a.round = round;
    a.world_size = world_size;
    a.group_world_size = 2;
    a.buddy_addr = "10.0.0.2";
    a.buddy_port = 1;
    return a;
  }
  void Snapshot(int64_t step, const std::string& payload) {
    WriteSnapshot(store_->fd(0), step, payload);
    replicator_->OnSnapshot(0, step);
  }
  std::vector<int64_t> Attempts() {
    CheckedMutexLock lock(&log_->mu);
    return log_->attempts;
  }

  std::shared_ptr<BuddyLog> log_ = std::make_shared<BuddyLog>();
  std::unique_ptr<SnapshotStore> store_;
  std::unique_ptr<Replicator> replicator_;
};

TEST_F(ReplicatorTest, TheFirstSnapshotAndThoseCrossingABoundaryTravel) {
  Start(/*failures=*/0);
  Snapshot(1, "step one");
  ASSERT_TRUE(log_->AwaitKept(1));
  Snapshot(5, "step five");   // crosses no multiple of 10
  Snapshot(12, "step twelve");  // crosses 10
  ASSERT_TRUE(log_->AwaitKept(2));
  EXPECT_EQ(Attempts(), (std::vector<int64_t>{1, 12}));
  CheckedMutexLock lock(&log_->mu);
  EXPECT_EQ(log_->kept, (std::vector<std::string>{"step one", "step twelve"}));
}

// The pinned steps come from the worker's reports, not from a look at its region: a boundary
// snapshot overwritten before the pinner copied it is skipped, never replaced by a later step
// (which the other nodes, which pinned the boundary step, would not hold).
TEST_F(ReplicatorTest, ABoundarySnapshotOverwrittenBeforeItWasPinnedIsSkippedNotReplaced) {
  Start(/*failures=*/0);
  Snapshot(1, "step one");
  ASSERT_TRUE(log_->AwaitKept(1));
  replicator_->OnSnapshot(0, 10);  // reported, but the region already holds 11 and 12 instead
  WriteSnapshot(store_->fd(0), 11, "step eleven");
  replicator_->OnSnapshot(0, 11);
  Snapshot(12, "step twelve");
  Snapshot(20, "step twenty");  // crosses 20: pinned and sent
  ASSERT_TRUE(log_->AwaitKept(2));
  EXPECT_EQ(Attempts(), (std::vector<int64_t>{1, 20}));
}

TEST_F(ReplicatorTest, ACopyThatDidNotArriveGoesAgainUntilItDoes) {
  Start(/*failures=*/2);
  Snapshot(1, "step one");
  ASSERT_TRUE(log_->AwaitKept(1)) << "attempts: " << Attempts().size();
  EXPECT_EQ(Attempts(), (std::vector<int64_t>{1, 1, 1}));
  CheckedMutexLock lock(&log_->mu);
  EXPECT_EQ(log_->kept, (std::vector<std::string>{"step one"}));
}

// A round of another world size (an elastic job that grew from 2 ranks to 3): the node restores the
// state it holds, taken by the old world, instead of asking its buddy for copies of the new one.
// With peers off only this rank's own (rank, world size) counts, and it asks.
TEST_F(ReplicatorTest, ANodeWhoseWorldChangedRestoresWhatItHoldsWithoutAFetch) {
  Start(/*failures=*/0);
  Snapshot(4, "taken by the world of 2");
  const rdzv::Assignment grown = RoundOf(1, 3);
  EXPECT_TRUE(replicator_->ReadyFor(grown)) << "no fetch";

  setenv(env::kSnapshotPeers, "off", 1);
  absl::StatusOr<SnapshotStore> store = SnapshotStore::Create(1, 1 << 20, /*with_replicas=*/true);
  ASSERT_TRUE(store.ok()) << store.status();
  WriteSnapshot(store->fd(0), 4, "taken by the world of 2");
  Replicator own_only(Replication(), *store, kJob);
  unsetenv(env::kSnapshotPeers);
  EXPECT_FALSE(own_only.ReadyFor(grown)) << "fetching";
  AwaitReady(own_only, grown);
  CheckedMutexLock lock(&log_->mu);
  EXPECT_EQ(log_->fetches, 1);
}

// A buddy that dies after the round forms holds this node's fetch. The next round, which gives
// this node another buddy, ends that fetch at once and fetches from the new one; a newer round
// with the same buddy leaves the fetch alone.
TEST_F(ReplicatorTest, ANewBuddyEndsAFetchFromTheOldOne) {
  auto silent = std::make_shared<SilentHost>();
  BuddyReplication r = Replication();
  r.connect = [log = log_, silent](const std::string& host, int) -> std::unique_ptr<replica::BuddyChannel> {
    if (host == "10.0.0.2") return std::make_unique<SilentBuddy>(silent);
    return std::make_unique<FakeBuddy>(log);
  };
  absl::StatusOr<SnapshotStore> store = SnapshotStore::Create(1, 1 << 20, /*with_replicas=*/true);
  ASSERT_TRUE(store.ok()) << store.status();
  Replicator replicator(std::move(r), *store, kJob);
  ASSERT_FALSE(replicator.ReadyFor(RoundOf(1, 2))) << "holds nothing: fetches from 10.0.0.2";
  ASSERT_TRUE(silent->AwaitFetch()) << "the fetch never asked 10.0.0.2";
  rdzv::Assignment same_buddy = RoundOf(2, 2);
  EXPECT_FALSE(replicator.ReadyFor(same_buddy));
  {
    CheckedMutexLock lock(&silent->mu);
    EXPECT_FALSE(silent->cancelled) << "the same buddy: the fetch goes on";
  }
  rdzv::Assignment new_buddy = RoundOf(3, 2);
  new_buddy.buddy_addr = "10.0.0.3";
  EXPECT_FALSE(replicator.ReadyFor(new_buddy));
  AwaitReady(replicator, new_buddy);
  {
    CheckedMutexLock lock(&silent->mu);
    EXPECT_TRUE(silent->cancelled);
    EXPECT_EQ(silent->fetches, 1);
  }
  CheckedMutexLock lock(&log_->mu);
  EXPECT_EQ(log_->fetches, 1) << "the new buddy was asked";
}

// With failure domains a node's buddy may change with the round: the copies of the ranks it took
// over are where the last rounds sent them. The fetch asks those places in turn, the buddy last:
// one unreachable, the next holds the copy, and the buddy (a new one, holding nothing) is not asked.
TEST_F(ReplicatorTest, TheCopiesAreFetchedFromWhereTheLastRoundsSentThemBeforeTheBuddy) {
  auto holders = std::make_shared<Holders>();
  {
    CheckedMutexLock lock(&holders->mu);
    holders->unreachable.insert("10.0.0.4");
    holders->copies["10.0.0.5"].push_back(CopyOf(7, "rank 0 at step 7"));
  }
  Start(/*failures=*/0, holders);
  rdzv::Assignment a = RoundOf(1, 2);
  a.buddy_addr = "10.0.0.3";
  a.copies_at = {{"10.0.0.4", 1}, {"10.0.0.5", 1}};
  AwaitReady(*replicator_, a);
  {
    CheckedMutexLock lock(&holders->mu);
    EXPECT_EQ(holders->asked, (std::vector<std::string>{"10.0.0.4", "10.0.0.5"}));
  }
  const std::vector<std::string> notes = replicator_->TakeFetchNotes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(notes[0], "rank 0: fetched the buddy copies of step 7 (")) << notes[0];
  EXPECT_TRUE(absl::EndsWith(notes[0], ") from 10.0.0.5:1")) << notes[0];
  std::vector<int64_t> held;
  for (const absl::StatusOr<snapshot::SlotHeader>& h : snapshot::ReadHeaders(store_->replica_fd(0))) {
    if (h.ok() && h->job == kJob) held.push_back(h->step);
  }
  EXPECT_EQ(held, (std::vector<int64_t>{7}));
}

// Where no place holds a copy, the note says where the fetch looked and what each said.
TEST_F(ReplicatorTest, ARankWithoutACopySaysWhereItLooked) {
  auto holders = std::make_shared<Holders>();
  {
    CheckedMutexLock lock(&holders->mu);
    holders->unreachable.insert("10.0.0.4");
  }
  Start(/*failures=*/0, holders);
  rdzv::Assignment a = RoundOf(1, 2);
  a.buddy_addr = "10.0.0.3";
  a.copies_at = {{"10.0.0.4", 1}, {"10.0.0.3", 1}};  // the buddy named once, where it was
  AwaitReady(*replicator_, a);
  EXPECT_EQ(replicator_->TakeFetchNotes(),
            (std::vector<std::string>{"rank 0: no buddy copy (10.0.0.4:1: failed to connect; 10.0.0.3:1 holds none)"}));
  CheckedMutexLock lock(&holders->mu);
  EXPECT_EQ(holders->asked, (std::vector<std::string>{"10.0.0.4", "10.0.0.3"}));
}

}  // namespace
}  // namespace dtrun
