// dtrun --snapshot-dir on a real directory: an unfinished job's snapshots come back in the next
// run's regions under its own job, for the ranks they were taken by or, when the world size
// changed, for any rank (replicas); a keep with
// nothing to keep leaves the old files; a finished job's files are removed; a directory another
// user could write to is refused, and a planted symlink or a damaged file is not loaded.
#include "agent/snapshot_dir.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/env_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_snapshots.h"

namespace dtrun {
namespace {

using ::dtrun::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const uint64_t kBefore = snapshot::JobHash("before");
const uint64_t kAfter = snapshot::JobHash("after");

std::string Hex(uint64_t job) { return absl::StrFormat("%016x", job); }

// Ranks 2 and 3 of 4 on this node, each with the snapshots of steps 7 and 8.
SnapshotStore StoreOfRanks2And3() {
  SnapshotStore store = testing::TwoRankSnapshotStore();
  for (int lr = 0; lr < 2; ++lr) {
    for (int64_t step : {7, 8}) {
      testing::WriteTestSnapshot(store.fd(lr), snapshot::SlotHeader{kBefore, 2 + lr, 4, step, 0, 0, 0, 0},
                                 std::string(3000, static_cast<char>(step + lr)));
    }
  }
  return store;
}

// The run lock of `job` in `dir` (invalid, with a failure, where it cannot be taken).
UniqueFd Hold(const SnapshotDir& dir, uint64_t job) {
  absl::StatusOr<UniqueFd> held = dir.HoldRun(job);
  EXPECT_TRUE(held.ok()) << held.status();
  return held.ok() ? std::move(*held) : UniqueFd();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SnapshotDirTest, AnUnfinishedJobsSnapshotsComeBackInTheNextRunsRegions) {
  const std::string path = testing::MakeTempDir() + "/new/kept";
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);  // made private: it holds the job's state

  const SnapshotDir::Outcome kept = dir->Keep(StoreOfRanks2And3(), kBefore);
  EXPECT_TRUE(kept.problems.empty()) << kept.problems[0];
  EXPECT_EQ(kept.Describe(), "2 ranks' snapshots of steps 7, 8 (12 kB)");
  EXPECT_THAT(Names(path), ElementsAre("rank-2-of-4.dtsnap", "rank-3-of-4.dtsnap"));  // no temporary left
  ASSERT_EQ(::stat((path + "/rank-2-of-4.dtsnap").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  dir = SnapshotDir::Open(path);  // the next run's
  ASSERT_TRUE(dir.ok()) << dir.status();
  SnapshotStore next = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = dir->Load(next, kAfter, 2, 4);
  EXPECT_TRUE(loaded.problems.empty()) << loaded.problems[0];
  EXPECT_EQ(loaded.ranks, 2);
  EXPECT_THAT(loaded.steps, ElementsAre(7, 8));
  for (int lr = 0; lr < 2; ++lr) {
    std::optional<snapshot::SlotHeader> newest = next.Newest(lr);
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->job, kAfter);
    EXPECT_EQ(newest->rank, 2 + lr);
    EXPECT_EQ(newest->step, 8);
  }

  // Other ranks of the same world take nothing: their own agents load their files.
  SnapshotStore other = testing::TwoRankSnapshotStore();
  EXPECT_EQ(dir->Load(other, kAfter, 0, 4).ranks, 0);
  EXPECT_FALSE(other.Newest(0).has_value());

  // A keep with nothing to keep (the job stopped before any snapshot) leaves the files as they were.
  EXPECT_EQ(dir->Keep(testing::TwoRankSnapshotStore(), kAfter).ranks, 0);
  EXPECT_THAT(Names(path), ElementsAre("rank-2-of-4.dtsnap", "rank-3-of-4.dtsnap"));

  // The job finished as ranks 2 and 3 of 4; a temporary a killed agent left goes too.
  std::ofstream(path + "/.keep-" + Hex(kBefore) + "-a1B2c3.tmp") << "cut short by a SIGKILL";
  EXPECT_EQ(dir->Clear(kAfter, 2, 2, 4).removed, 2);
  EXPECT_TRUE(Names(path).empty());
}

// Runs `keep` in a child that is pid 1 of a pid namespace of its own, as an agent in a container
// is; in a plain child where namespaces cannot be made. The child's exit status: 0 if `keep` said
// true.
pid_t KeepInContainer(int go_fd, std::function<bool()> keep) {
  const pid_t child = ::fork();
  if (child != 0) return child;
  if (::unshare(CLONE_NEWPID) == 0) {
    const pid_t container = ::fork();
    if (container > 0) {
      int status = 0;
      ::waitpid(container, &status, 0);
      ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 99);
    }
  }
  char go;
  if (::read(go_fd, &go, 1) != 1) ::_exit(98);
  ::_exit(keep() ? 0 : 1);
}

// Shared storage: two nodes' agents keep into one directory, each with its own ranks, at the same
// time and again and again (the --snapshot-dir-every copies), both as pid 1 of their containers.
// Every file is whole and holds its own rank's state: no agent writes into another's temporary.
TEST(SnapshotDirTest, TwoNodesInContainersKeepIntoOneSharedDirectoryWithoutClobberingEachOther) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  std::vector<SnapshotStore> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(testing::TwoRankSnapshotStore());
    for (int lr = 0; lr < 2; ++lr) {
      const int rank = 2 * node + lr;
      testing::WriteTestSnapshot(nodes.back().fd(lr), snapshot::SlotHeader{kBefore, rank, 4, 9, 0, 0, 0, 0},
                                 std::string(400000, static_cast<char>('a' + rank)));
    }
  }
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> agents;
  for (const SnapshotStore& store : nodes) {
    agents.push_back(KeepInContainer(go[0], [&] {
      for (int i = 0; i < 40; ++i) {
        const SnapshotDir::Outcome kept = dir->Keep(store, kBefore);
        if (kept.ranks != 2 || !kept.problems.empty()) return false;
      }
      return true;
    }));
  }
  ::close(go[0]);
  ASSERT_EQ(::write(go[1], "gg", 2), 2);  // both start together
  ::close(go[1]);
  for (pid_t agent : agents) {
    int status = 0;
    ASSERT_EQ(::waitpid(agent, &status, 0), agent);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "an agent's keep failed: status " << status;
  }
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-4.dtsnap", "rank-1-of-4.dtsnap", "rank-2-of-4.dtsnap",
                                       "rank-3-of-4.dtsnap"));
  absl::StatusOr<SnapshotDir> next_run = SnapshotDir::Open(path);
  ASSERT_TRUE(next_run.ok()) << next_run.status();
  for (int node = 0; node < 2; ++node) {
    SnapshotStore next = testing::TwoRankSnapshotStore();
    const SnapshotDir::Outcome loaded = next_run->Load(next, kAfter, 2 * node, 4);
    EXPECT_TRUE(loaded.problems.empty()) << loaded.problems[0];
    EXPECT_EQ(loaded.ranks, 2);
    for (int lr = 0; lr < 2; ++lr) {
      absl::StatusOr<snapshot::MappedRegion> region = snapshot::MappedRegion::Map(next.fd(lr));
      ASSERT_TRUE(region.ok()) << region.status();
      std::optional<snapshot::SlotHeader> newest = next.Newest(lr);
      ASSERT_TRUE(newest.has_value());
      EXPECT_EQ(newest->rank, 2 * node + lr);
      for (int slot = 0; slot < snapshot::kSlots; ++slot) {
        if (!region->Header(slot).ok()) continue;
        EXPECT_EQ(region->Verify(slot, *region->Header(slot)), absl::OkStatus());
        EXPECT_EQ(region->Payload(slot)[0], static_cast<char>('a' + 2 * node + lr));
      }
    }
  }
}

// Two jobs given one directory, both running (each holds its run lock): a file the other wrote is
// neither replaced nor removed, and one line names the directory and the fix; the files of the run
// before (over: no lock held) and this run's own are.
TEST(SnapshotDirTest, AFileAnotherRunningJobWroteIsNeitherReplacedNorRemoved) {
  const std::string path = testing::MakeTempDir();
  ASSERT_EQ(SnapshotDir::Open(path)->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);  // the run before
  absl::StatusOr<SnapshotDir> mine = SnapshotDir::Open(path);
  absl::StatusOr<SnapshotDir> theirs = SnapshotDir::Open(path);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  const uint64_t kMine = snapshot::JobHash("mine"), kTheirs = snapshot::JobHash("theirs");
  UniqueFd my_lock = Hold(*mine, kMine), their_lock = Hold(*theirs, kTheirs);
  ASSERT_TRUE(my_lock.valid() && their_lock.valid()) << "no file locks in " << path;
  auto store_of = [](uint64_t job) {
    SnapshotStore store = testing::TwoRankSnapshotStore();
    for (int lr = 0; lr < 2; ++lr) {
      testing::WriteTestSnapshot(store.fd(lr), snapshot::SlotHeader{job, 2 + lr, 4, 9, 0, 0, 0, 0}, "state");
    }
    return store;
  };
  const SnapshotStore my_store = store_of(kMine), their_store = store_of(kTheirs);

  ASSERT_TRUE(mine->KeepRank(my_store, 0, kMine, snapshot::Slots::kNewest).ok());  // replaces the run before's
  ASSERT_TRUE(theirs->KeepRank(their_store, 1, kTheirs, snapshot::Slots::kNewest).ok());
  EXPECT_THAT(theirs->KeepRank(their_store, 0, kTheirs, snapshot::Slots::kNewest),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "the snapshot of rank 2 in " + path + " is another run's, one running at the same time as this "
                       "one: two jobs share --snapshot-dir " + path + "; give each job a directory of its own (not "
                       "replaced)"));
  const SnapshotDir::Outcome kept = mine->Keep(my_store, kMine);
  EXPECT_EQ(kept.ranks, 1);
  EXPECT_THAT(kept.problems, ElementsAre(HasSubstr("the snapshot of rank 3 in " + path + " is another run's")));
  EXPECT_THAT(Names(path), ElementsAre(::testing::StartsWith(".run-"), ::testing::StartsWith(".run-"),
                                       "rank-2-of-4.dtsnap", "rank-3-of-4.dtsnap"));  // no temporary left

  const SnapshotDir::Cleared cleared = mine->Clear(kMine, 2, 2, 4);
  EXPECT_EQ(cleared.removed, 1);
  EXPECT_THAT(cleared.problems, ElementsAre(AllOf(HasSubstr("the snapshot of rank 3 in " + path + " is another run's"),
                                                  HasSubstr("(left there)"))));
  mine->ReleaseRun(std::move(my_lock), kMine);
  EXPECT_THAT(Names(path), ElementsAre(".run-" + Hex(kTheirs) + ".lock", "rank-3-of-4.dtsnap"));
  theirs->ReleaseRun(std::move(their_lock), kTheirs);
  SnapshotStore next = testing::TwoRankSnapshotStore();
  EXPECT_EQ(SnapshotDir::Open(path)->Load(next, kAfter, 2, 4).ranks, 1);  // theirs, whole, once it is over
}

// A job started while another with the same directory still runs (its agents hold its run lock)
// does not resume from that job's copies: they are not a stopped run's state. Once that job has
// ended, they are, and its lock file is gone with its last agent; one a killed run left is
// removed by the next run that finishes.
TEST(SnapshotDirTest, TheFilesOfAJobStillRunningAreNotLoaded) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> running = SnapshotDir::Open(path);
  ASSERT_TRUE(running.ok()) << running.status();
  UniqueFd lock = Hold(*running, kBefore);
  ASSERT_TRUE(lock.valid()) << "no file locks in " << path;
  UniqueFd other_agent = Hold(*running, kBefore);  // another node of the same job
  ASSERT_TRUE(other_agent.valid());
  ASSERT_EQ(running->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);  // its --snapshot-dir-every copies

  SnapshotStore next = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = SnapshotDir::Open(path)->Load(next, kAfter, 2, 4);
  EXPECT_EQ(loaded.ranks, 0);
  EXPECT_THAT(loaded.problems, ElementsAre("the snapshots of ranks 2, 3 in " + path + " are another run's, one running "
                                           "at the same time as this one: two jobs share --snapshot-dir " + path +
                                           "; give each job a directory of its own (not loaded)"));
  EXPECT_FALSE(next.Newest(0).has_value());

  running->ReleaseRun(std::move(lock), kBefore);
  EXPECT_EQ(SnapshotDir::Open(path)->Load(next, kAfter, 2, 4).ranks, 0);  // one of its agents still runs
  running->ReleaseRun(std::move(other_agent), kBefore);
  EXPECT_THAT(Names(path), ElementsAre("rank-2-of-4.dtsnap", "rank-3-of-4.dtsnap"));  // its lock went with it
  EXPECT_EQ(SnapshotDir::Open(path)->Load(next, kAfter, 2, 4).ranks, 2);

  { UniqueFd killed = Hold(*running, kBefore); }  // its agents SIGKILLed: no ReleaseRun
  ASSERT_EQ(Names(path).size(), 3u);
  // The next run finishes as ranks 0 and 1 of 2: the other world's files and the lock go.
  EXPECT_EQ(SnapshotDir::Open(path)->Clear(kAfter, 0, 2, 2).removed, 2);
  EXPECT_TRUE(Names(path).empty());
}

// Where the run lock cannot be taken (a filesystem mounted without locks; here a directory holds
// its name), the agent says why and what to do, and keeping and loading work as before.
TEST(SnapshotDirTest, ARunLockThatCannotBeTakenIsNamedWithTheFixAndTheSnapshotsStillKept) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string lock = path + "/.run-" + Hex(kBefore) + ".lock";
  ASSERT_EQ(::mkdir(lock.c_str(), 0700), 0);
  EXPECT_THAT(dir->HoldRun(kBefore).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("--snapshot-dir " + path + ": cannot lock " + lock +
                                       " (Is a directory): a "
                                       "second job given this directory while this one runs would resume from, or "
                                       "replace, this job's snapshots unnoticed"),
                             HasSubstr("give each job a directory of its own"))));
  ASSERT_EQ(dir->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);
  SnapshotStore next = testing::TwoRankSnapshotStore();
  EXPECT_EQ(dir->Load(next, kAfter, 2, 4).ranks, 2);
}

// At a job's end each agent removes its own ranks' files, not its peers' (in a shared directory
// they remove their own), and every file of another world size.
// Ranks 0 and 1 of a world of `world_size`, each with one snapshot of `step`.
SnapshotStore StoreOfRanks0And1(int64_t world_size, int64_t step) {
  SnapshotStore store = testing::TwoRankSnapshotStore();
  for (int lr = 0; lr < 2; ++lr) {
    testing::WriteTestSnapshot(store.fd(lr), snapshot::SlotHeader{kBefore, lr, world_size, step, 0, 0, 0, 0},
                               "state of step " + std::to_string(step));
  }
  return store;
}

// Each file is removed by one agent: this world's by the agent of its rank, another world's by
// the agent of the rank it maps to (rank mod this world's size).
TEST(SnapshotDirTest, AnAgentClearsItsOwnRanksAndTheOtherWorldsFilesThatMapToThem) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->Keep(StoreOfRanks0And1(2, 5), kBefore).ranks, 2);  // ranks 0, 1 of 2
  ASSERT_EQ(dir->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);       // ranks 2, 3 of 4
  ASSERT_EQ(Names(path).size(), 4u);
  EXPECT_EQ(dir->Clear(kAfter, 2, 2, 4).removed, 2);  // the agent of ranks 2 and 3
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-2.dtsnap", "rank-1-of-2.dtsnap"));
  ASSERT_EQ(dir->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);
  EXPECT_EQ(dir->Clear(kAfter, 0, 2, 4).removed, 2);  // the agent of ranks 0 and 1
  EXPECT_THAT(Names(path), ElementsAre("rank-2-of-4.dtsnap", "rank-3-of-4.dtsnap"));
}

// The nodes or --nproc-per-node changed between two runs: the ranks are replicas, so the next
// run loads the state the other world kept (each rank its own rank's file of that world, else one
// whose rank maps to it: a node-local directory holds only its node's), and once it keeps its
// own, the other world's files it answers for go: a run back in that world would go back to them.
// With DTRUN_SNAPSHOT_PEERS=off nothing of another world is loaded, and a line says why.
TEST(SnapshotDirTest, ARunInAnotherWorldSizeResumesFromTheStateTheOldWorldKeptAndThenSupersedesIt) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);  // ranks 2, 3 of 4: a node-local directory

  setenv(env::kSnapshotPeers, "off", 1);
  SnapshotStore strict = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome refused = dir->Load(strict, kAfter, 0, 2);
  unsetenv(env::kSnapshotPeers);
  EXPECT_EQ(refused.ranks, 0);
  EXPECT_THAT(refused.problems, ElementsAre(HasSubstr("holds snapshots of a world of 4 ranks, not 2: not used "
                                                      "(DTRUN_SNAPSHOT_PEERS=off")));
  EXPECT_FALSE(strict.Newest(0).has_value());

  SnapshotStore smaller = testing::TwoRankSnapshotStore();  // ranks 0 and 1 of 2: neither 0 nor 1 of 4 is here
  const SnapshotDir::Outcome loaded = dir->Load(smaller, kAfter, 0, 2);
  EXPECT_TRUE(loaded.problems.empty()) << loaded.problems[0];
  EXPECT_EQ(loaded.Describe(), "2 ranks' snapshots of steps 7, 8 (12 kB)");
  EXPECT_EQ(loaded.taken_by_world, 4);
  for (int lr = 0; lr < 2; ++lr) {
    std::optional<snapshot::SlotHeader> newest = smaller.Newest(lr);
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->job, kAfter);
    EXPECT_EQ(newest->world_size, 4);
    EXPECT_EQ(newest->step, 8);
  }

  // That run trains on in its world of 2 and is stopped again: its state supersedes the old world's.
  const SnapshotDir::Outcome kept = dir->Keep(StoreOfRanks0And1(2, 12), kBefore);
  EXPECT_EQ(kept.ranks, 2);
  EXPECT_EQ(kept.superseded, 2);
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-2.dtsnap", "rank-1-of-2.dtsnap"));
  // A world of 4 again: ranks 0 and 1 take the two files; ranks 2 and 3 take none (no file maps to
  // them) and will receive a holder's copy, so that each old rank's state is weighed once.
  SnapshotStore upper = testing::TwoRankSnapshotStore();
  EXPECT_EQ(dir->Load(upper, kAfter, 2, 4).ranks, 0);
  SnapshotStore lower = testing::TwoRankSnapshotStore();
  EXPECT_EQ(dir->Load(lower, kAfter, 0, 4).taken_by_world, 2);
  for (int lr = 0; lr < 2; ++lr) {
    std::optional<snapshot::SlotHeader> newest = lower.Newest(lr);
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->rank, lr);
    EXPECT_EQ(newest->step, 12);
  }
}

// Names another local user could plant: a rank past int64, a world of 0 ranks, a rank outside its
// world, signs, spaces, hex, missing or extra parts. Nothing is loaded from them, nothing throws,
// and a finished job's agent removes only what it answers for (rank mod its world size), leaving
// the names it cannot read.
TEST(SnapshotDirTest, PlantedNamesWithHostileNumbersAreNeitherLoadedNorFatal) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  for (const char* name :
       {"rank-99999999999999999999-of-2.dtsnap", "rank-0-of-0.dtsnap", "rank-5-of-2.dtsnap",
        "rank-1-of-99999999999999999999.dtsnap", "rank-+1-of-2.dtsnap", "rank- 1-of-2.dtsnap", "rank--of-2.dtsnap",
        "rank-1-of-.dtsnap", "rank-1-of-2-of-3.dtsnap", "rank-1-of-2.dtsnap.old", "rank-0x1-of-2.dtsnap"}) {
    std::ofstream(path + "/" + name) << "planted";
  }
  SnapshotStore store = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = dir->Load(store, kAfter, 0, 3);
  EXPECT_EQ(loaded.ranks, 0);
  EXPECT_FALSE(store.Newest(0).has_value());
  EXPECT_EQ(dir->Clear(kAfter, 0, 2, 4).removed, 2);  // rank 0 of 0 and rank 5 of 2 map to ranks 0, 1
  // Names that are not rank-DIGITS-of-DIGITS.dtsnap are not snapshot files: neither read nor removed.
  EXPECT_THAT(Names(path),
              ElementsAre("rank- 1-of-2.dtsnap", "rank-+1-of-2.dtsnap", "rank--of-2.dtsnap", "rank-0x1-of-2.dtsnap",
                          "rank-1-of-.dtsnap", "rank-1-of-2-of-3.dtsnap", "rank-1-of-2.dtsnap.old",
                          "rank-1-of-99999999999999999999.dtsnap", "rank-99999999999999999999-of-2.dtsnap"));
}

// Sets when the files of `world` in `path` were written, as if at `seconds`.
void WrittenAt(const std::string& path, int64_t world, time_t seconds) {
  const struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  for (const std::string& name : Names(path)) {
    if (absl::EndsWith(name, absl::StrCat("-of-", world, ".dtsnap"))) {
      ASSERT_EQ(::utimensat(AT_FDCWD, (path + "/" + name).c_str(), times, 0), 0) << name;
    }
  }
}

// Of two other worlds' files (a removal that failed), the one written last is loaded.
TEST(SnapshotDirTest, OfTwoOtherWorldsTheOneWrittenLastIsLoaded) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  // Neither run loaded the other's, so neither superseded the other's files.
  ASSERT_EQ(dir->Keep(StoreOfRanks0And1(3, 30), kBefore).ranks, 2);
  ASSERT_EQ(SnapshotDir::Open(path)->Keep(StoreOfRanks0And1(2, 20), kBefore).ranks, 2);
  WrittenAt(path, 3, 2000);
  WrittenAt(path, 2, 1000);
  SnapshotStore store = testing::TwoRankSnapshotStore();
  EXPECT_EQ(SnapshotDir::Open(path)->Load(store, kAfter, 0, 4).taken_by_world, 3);
  ASSERT_TRUE(store.Newest(0).has_value());
  EXPECT_EQ(store.Newest(0)->step, 30);
  WrittenAt(path, 2, 3000);
  SnapshotStore again = testing::TwoRankSnapshotStore();
  EXPECT_EQ(SnapshotDir::Open(path)->Load(again, kAfter, 0, 4).taken_by_world, 2);
  ASSERT_TRUE(again.Newest(1).has_value());
  EXPECT_EQ(again.Newest(1)->step, 20);
}

// The persister copies rank after rank. A launcher SIGKILLed in the middle of the first pass of a
// run in a new world leaves that world's file for some ranks beside the old world's files for the
// rest. The next run goes on from the state written last, whichever world it has; before, a run
// that found any file of its own world took only those, and went back to the older state.
TEST(SnapshotDirTest, AWorldsFilesFromAPassCutShortWinOverTheOlderFilesOfTheRunsOwnWorld) {
  const std::string path = testing::MakeTempDir();
  ASSERT_EQ(SnapshotDir::Open(path)->Keep(StoreOfRanks0And1(2, 60), kBefore).ranks, 2);
  WrittenAt(path, 2, 1000);

  // The next run has 4 ranks on this node; its ranks 0 and 1 load the world of 2's step 60.
  const uint64_t kWider = snapshot::JobHash("wider");
  absl::StatusOr<SnapshotDir> wider = SnapshotDir::Open(path);
  ASSERT_TRUE(wider.ok()) << wider.status();
  SnapshotStore wide = testing::TwoRankSnapshotStore();
  ASSERT_EQ(wider->Load(wide, kWider, 0, 4).taken_by_world, 2);
  // It trains to step 70; the first pass of copies writes rank 0's file (which supersedes rank 0
  // of 2's) and is cut short by the SIGKILL.
  testing::WriteTestSnapshot(wide.fd(0), snapshot::SlotHeader{kWider, 0, 4, 70, 0, 0, 0, 0}, "state of step 70");
  ASSERT_TRUE(wider->KeepRank(wide, 0, kWider, snapshot::Slots::kNewest).ok());
  ASSERT_THAT(Names(path), ElementsAre("rank-0-of-4.dtsnap", "rank-1-of-2.dtsnap"));
  WrittenAt(path, 4, 2000);

  // Requeued with 2 ranks again: rank 0 takes rank 0 of 4's step 70 (rank 1 will receive its
  // copy), not its own world's older file.
  const uint64_t kNarrower = snapshot::JobHash("narrower");
  absl::StatusOr<SnapshotDir> narrower = SnapshotDir::Open(path);
  ASSERT_TRUE(narrower.ok()) << narrower.status();
  SnapshotStore narrow = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = narrower->Load(narrow, kNarrower, 0, 2);
  EXPECT_EQ(loaded.taken_by_world, 4);
  EXPECT_THAT(loaded.steps, ElementsAre(70));
  ASSERT_TRUE(narrow.Newest(0).has_value());
  EXPECT_EQ(narrow.Newest(0)->step, 70);
  EXPECT_FALSE(narrow.Newest(1).has_value());
  // Its own world's older file goes.
  EXPECT_EQ(loaded.superseded, 1);
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-4.dtsnap"));

  // That run trains to step 80, and is SIGKILLed after copying rank 0, whose file supersedes rank
  // 0 of 4's. Back in a world of 4, the job goes on from step 80.
  testing::WriteTestSnapshot(narrow.fd(0), snapshot::SlotHeader{kNarrower, 0, 2, 80, 0, 0, 0, 0}, "state of step 80");
  ASSERT_TRUE(narrower->KeepRank(narrow, 0, kNarrower, snapshot::Slots::kNewest).ok());
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-2.dtsnap"));
  SnapshotStore wide_again = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome again = SnapshotDir::Open(path)->Load(wide_again, kAfter, 0, 4);
  EXPECT_EQ(again.taken_by_world, 2);
  EXPECT_THAT(again.steps, ElementsAre(80));
}

// A node-local directory after the world shrank: rank 0 of the smaller world superseded only the
// files that map to it, so the node's other file of the wider world stays, older. When the job is
// back in the wider world, the node's ranks go on from the smaller world's newer file, not from
// the leftover of their own world (before, the whole job went back to it), and the leftover is
// removed.
TEST(SnapshotDirTest, TheRunsOwnWorldsLeftoverFileLosesToAnotherWorldsNewerOne) {
  const std::string path = testing::MakeTempDir();
  ASSERT_EQ(SnapshotDir::Open(path)->Keep(StoreOfRanks0And1(4, 50), kBefore).ranks, 2);  // ranks 0, 1 of 4
  absl::StatusOr<SnapshotDir> smaller = SnapshotDir::Open(path);
  ASSERT_TRUE(smaller.ok()) << smaller.status();
  absl::StatusOr<SnapshotStore> one = SnapshotStore::Create(1, 1 << 20);  // rank 0 of 2, this node's only
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(smaller->Load(*one, kBefore, 0, 2).taken_by_world, 4);
  testing::WriteTestSnapshot(one->fd(0), snapshot::SlotHeader{kBefore, 0, 2, 90, 0, 0, 0, 0}, "state of step 90");
  EXPECT_EQ(smaller->Keep(*one, kBefore).superseded, 1);
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-2.dtsnap", "rank-1-of-4.dtsnap"));
  // Files of the run's own world written as late as the other's are its own to go on from.
  WrittenAt(path, 4, 2000);
  WrittenAt(path, 2, 2000);
  SnapshotStore tie = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome own = SnapshotDir::Open(path)->Load(tie, kAfter, 0, 4);
  EXPECT_EQ(own.taken_by_world, 0);
  EXPECT_EQ(own.superseded, 0);
  ASSERT_TRUE(tie.Newest(1).has_value());
  EXPECT_EQ(tie.Newest(1)->step, 50);

  WrittenAt(path, 4, 1000);
  SnapshotStore store = testing::TwoRankSnapshotStore();  // ranks 0 and 1 of 4 again
  const SnapshotDir::Outcome loaded = SnapshotDir::Open(path)->Load(store, kAfter, 0, 4);
  EXPECT_EQ(loaded.taken_by_world, 2);
  EXPECT_THAT(loaded.steps, ElementsAre(90));
  ASSERT_TRUE(store.Newest(0).has_value());
  EXPECT_EQ(store.Newest(0)->step, 90);
  EXPECT_FALSE(store.Newest(1).has_value());  // it receives rank 0's copy
  // The leftover goes: beside this run's first copies of rank 0 it would have outvoted them.
  EXPECT_EQ(loaded.superseded, 1);
  EXPECT_THAT(Names(path), ElementsAre("rank-0-of-2.dtsnap"));
}

TEST(SnapshotDirTest, APlantedSymlinkOrADamagedFileIsNotLoaded) {
  const std::string path = testing::MakeTempDir();
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(path);
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->Keep(StoreOfRanks2And3(), kBefore).ranks, 2);
  // Rank 2's file points elsewhere; a byte of rank 3's second payload flipped.
  const std::string rank2 = path + "/rank-2-of-4.dtsnap";
  std::filesystem::rename(rank2, path + "/elsewhere");
  std::filesystem::create_symlink(path + "/elsewhere", rank2);
  {
    std::fstream f(path + "/rank-3-of-4.dtsnap", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('\x55');
  }
  SnapshotStore next = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = SnapshotDir::Open(path)->Load(next, kAfter, 2, 4);
  EXPECT_THAT(loaded.problems, ElementsAre(HasSubstr("cannot read " + rank2),
                                           HasSubstr("rank-3-of-4.dtsnap not used: the snapshot of step 8 fails its "
                                                     "checksum: corrupted on disk")));
  EXPECT_FALSE(next.Newest(0).has_value());
  // Step 7, whole, is still loaded for rank 3: the restore then goes back one step, not to disk.
  ASSERT_TRUE(next.Newest(1).has_value());
  EXPECT_EQ(next.Newest(1)->step, 7);
  EXPECT_EQ(loaded.ranks, 1);
  EXPECT_THAT(loaded.steps, ElementsAre(7));
}

TEST(SnapshotDirTest, ADirectoryOthersCouldWriteToOrThatIsNoDirectoryIsRefusedWithTheFix) {
  const std::string base = testing::MakeTempDir();
  const std::string open = base + "/open";
  ASSERT_EQ(::mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);  // as /tmp
  EXPECT_THAT(SnapshotDir::Open(open), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                HasSubstr("every user may write in it; give a directory of your own")));
  std::ofstream(base + "/file") << "x";
  EXPECT_THAT(SnapshotDir::Open(base + "/file"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--snapshot-dir " + base + "/file: not a directory")));
  if (::geteuid() == 0) {
    const std::string theirs = base + "/theirs";
    ASSERT_EQ(::mkdir(theirs.c_str(), 0700), 0);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_THAT(SnapshotDir::Open(theirs), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("owned by uid 65534")));
  }
}

}  // namespace
}  // namespace dtrun
