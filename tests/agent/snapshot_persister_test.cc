// --snapshot-dir-every's copies (agent/snapshot_persister.h): each pass writes a rank's newest
// snapshot once, and again only when a newer one is taken; only the newest slot travels, and the
// next run loads it.
#include "agent/snapshot_persister.h"

#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/support/test_snapshots.h"

namespace dtrun {
namespace {

using ::testing::ElementsAre;

const uint64_t kJob = snapshot::JobHash("job");

void Snapshot(const SnapshotStore& store, int local_rank, int64_t step) {
  testing::WriteTestSnapshot(store.fd(local_rank), snapshot::SlotHeader{kJob, local_rank, 2, step, 0, 0, 0, 0},
                             std::string(2000, static_cast<char>(step)));
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

TEST(SnapshotPersisterTest, EachRanksNewestSnapshotIsCopiedOnceAndAgainWhenANewerOneIsTaken) {
  absl::StatusOr<SnapshotDir> dir = SnapshotDir::Open(testing::MakeTempDir());
  ASSERT_TRUE(dir.ok()) << dir.status();
  SnapshotStore store = testing::TwoRankSnapshotStore();
  // A pass an hour from now: only PersistNow copies here.
  SnapshotPersister persister(*dir, store, kJob, std::chrono::hours(1));
  EXPECT_TRUE(persister.PersistNow().empty());
  EXPECT_THAT(persister.written(), ElementsAre(-1, -1));  // nothing to copy yet

  for (int lr = 0; lr < 2; ++lr) {
    Snapshot(store, lr, 7);
    Snapshot(store, lr, 8);
  }
  EXPECT_TRUE(persister.PersistNow().empty());
  EXPECT_THAT(persister.written(), ElementsAre(8, 8));
  const std::string rank0 = dir->path() + "/rank-0-of-2.dtsnap";
  const ino_t first = Inode(rank0);
  persister.PersistNow();
  EXPECT_EQ(Inode(rank0), first);  // not written again: nothing newer

  Snapshot(store, 0, 9);
  persister.PersistNow();
  EXPECT_THAT(persister.written(), ElementsAre(9, 8));
  EXPECT_NE(Inode(rank0), first);

  // The next run (its own view of the directory) gets the newest step of each rank, and only that one.
  SnapshotStore next = testing::TwoRankSnapshotStore();
  const SnapshotDir::Outcome loaded = SnapshotDir::Open(dir->path())->Load(next, snapshot::JobHash("next run"), 0, 2);
  EXPECT_TRUE(loaded.problems.empty());
  EXPECT_THAT(loaded.steps, ElementsAre(8, 9));
  EXPECT_EQ(next.Newest(0)->step, 9);
  EXPECT_EQ(next.Newest(1)->step, 8);
  persister.Stop();
  persister.Stop();  // twice is fine: the job's end and the destructor
}

}  // namespace
}  // namespace dtrun
