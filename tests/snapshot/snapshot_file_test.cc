// A region's snapshots kept in a file (dtrun --snapshot-dir): they come back into a fresh region
// byte for byte and under the new run's job; only whole, verified snapshots of the newest rank are
// written; a damaged, cut or oversized file is refused with what is wrong, and a record is never
// committed before its checksum holds. The "files" are memfds: the format needs no disk.
#include "snapshot/snapshot_file.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_snapshots.h"

namespace dtrun::snapshot {
namespace {

using ::dtrun::testing::StatusIs;
using ::testing::HasSubstr;

struct Region {
  UniqueFd fd;
  MappedRegion map;
};

Region MakeRegion(uint64_t bytes = 1 << 20) {
  absl::StatusOr<UniqueFd> fd = CreateRegion(bytes, "test");
  EXPECT_TRUE(fd.ok()) << fd.status();
  absl::StatusOr<MappedRegion> map = MappedRegion::Map(fd->get());
  EXPECT_TRUE(map.ok()) << map.status();
  return Region{std::move(*fd), std::move(*map)};
}

// Writes `step`'s snapshot as a worker would: a payload of `bytes` bytes of `step`.
void Put(MappedRegion& region, const std::string& job, int64_t rank, int64_t step, uint64_t bytes = 5000) {
  testing::WriteTestSnapshot(region, SlotHeader{JobHash(job), rank, 2, step, 3, 0, 0, 1700000000000},
                             std::string(bytes, static_cast<char>(step)));
}

UniqueFd MemoryFile() { return UniqueFd(::memfd_create("file", MFD_CLOEXEC)); }

std::string Contents(int fd) {
  std::string out(static_cast<size_t>(::lseek(fd, 0, SEEK_END)), '\0');
  EXPECT_EQ(::pread(fd, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  return out;
}

UniqueFd FileWith(const std::string& bytes) {
  UniqueFd fd = MemoryFile();
  EXPECT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  return fd;
}

std::vector<int64_t> Steps(const std::vector<SlotHeader>& headers) {
  std::vector<int64_t> out;
  for (const SlotHeader& h : headers) out.push_back(h.step);
  return out;
}

// The file of a region holding rank 1's snapshots of steps 5 and 6 in run "before".
std::string KeptFile() {
  Region kept = MakeRegion();
  Put(kept.map, "before", 1, 5);
  Put(kept.map, "before", 1, 6);
  UniqueFd file = MemoryFile();
  absl::StatusOr<std::vector<SlotHeader>> written = WriteSnapshotFile(kept.map, JobHash("before"), file.get());
  EXPECT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(Steps(*written), ::testing::ElementsAre(5, 6));
  return Contents(file.get());
}

TEST(SnapshotFileTest, ASnapshotComesBackByteForByteUnderTheNewRunsJob) {
  const std::string bytes = KeptFile();
  Region fresh = MakeRegion();
  UniqueFd file = FileWith(bytes);
  absl::StatusOr<std::vector<SlotHeader>> placed = ReadSnapshotFile(file.get(), JobHash("after"), 1, 2, fresh.map);
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_THAT(Steps(*placed), ::testing::ElementsAre(5, 6));
  std::optional<SlotHeader> newest = Newest(ReadHeaders(fresh.fd.get()));
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->step, 6);
  EXPECT_EQ(newest->job, JobHash("after"));
  EXPECT_EQ(newest->attempt, 3);
  EXPECT_EQ(newest->unix_ms, 1700000000000);
  for (int slot = 0; slot < kSlots; ++slot) {
    absl::StatusOr<SlotHeader> h = fresh.map.Header(slot);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_TRUE(fresh.map.Verify(slot, *h).ok());
    EXPECT_EQ(fresh.map.Payload(slot)[4999], static_cast<char>(h->step));
  }
  // Another rank's or another world's reader takes nothing and leaves its region as it was.
  Region other = MakeRegion();
  for (auto [rank, world] : {std::pair<int64_t, int64_t>{0, 2}, {1, 4}}) {
    UniqueFd again = FileWith(bytes);
    absl::StatusOr<std::vector<SlotHeader>> none = ReadSnapshotFile(again.get(), JobHash("after"), rank, world, other.map);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_TRUE(none->empty());
    EXPECT_FALSE(Newest(ReadHeaders(other.fd.get())).has_value());
  }
}

TEST(SnapshotFileTest, OnlyWholeSnapshotsOfTheJobAndTheNewestRankAreWritten) {
  Region region = MakeRegion();
  UniqueFd empty = MemoryFile();
  absl::StatusOr<std::vector<SlotHeader>> none = WriteSnapshotFile(region.map, JobHash("job"), empty.get());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(Contents(empty.get()), "");  // nothing to keep: not even the magic

  // Step 4 was rank 0's (before the ranks changed hands), step 5 is rank 1's: only 5 is kept.
  Put(region.map, "job", 0, 4);
  Put(region.map, "job", 1, 5);
  UniqueFd file = MemoryFile();
  absl::StatusOr<std::vector<SlotHeader>> written = WriteSnapshotFile(region.map, JobHash("job"), file.get());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(Steps(*written), ::testing::ElementsAre(5));

  // A payload damaged in memory is left out; another run's snapshots are not this job's.
  Put(region.map, "job", 1, 6);  // replaces step 4
  const int six = region.map.Header(0).ok() && region.map.Header(0)->step == 6 ? 0 : 1;
  region.map.Payload(six)[10] ^= 1;
  UniqueFd damaged = MemoryFile();
  written = WriteSnapshotFile(region.map, JobHash("job"), damaged.get());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(Steps(*written), ::testing::ElementsAre(5));
  UniqueFd foreign = MemoryFile();
  written = WriteSnapshotFile(region.map, JobHash("another run"), foreign.get());
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_TRUE(written->empty());
}

// The copy runs while the worker goes on: a slot rewritten under it is refused, not written torn.
// The file is a pipe, so the copy waits for its reader: a child process, as the worker is, which
// rewrites the slot (the region is shared memory) once the copy has begun.
TEST(SnapshotFileTest, ASlotRewrittenWhileItIsCopiedIsRefused) {
  Region region = MakeRegion(4 << 20);
  Put(region.map, "job", 1, 5, 1000000);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t worker = ::fork();
  ASSERT_GE(worker, 0);
  if (worker == 0) {
    write_end.Reset();
    char chunk[4096];
    if (::read(read_end.get(), chunk, sizeof(chunk)) <= 0) ::_exit(1);  // the copy has begun
    Put(region.map, "job", 1, 6, 1000000);  // the other slot
    Put(region.map, "job", 1, 7, 1000000);  // the one being copied
    while (::read(read_end.get(), chunk, sizeof(chunk)) > 0) {
    }
    ::_exit(0);
  }
  read_end.Reset();
  absl::StatusOr<std::vector<SlotHeader>> written =
      WriteSnapshotFile(region.map, JobHash("job"), write_end.get(), Slots::kNewest);
  write_end.Reset();
  int status = 0;
  ASSERT_EQ(::waitpid(worker, &status, 0), worker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_THAT(written, StatusIs(absl::StatusCode::kAborted, HasSubstr("step 5 was rewritten while it was copied")));
}

TEST(SnapshotFileTest, ADamagedFileIsRefusedAndNoRecordIsCommittedBeforeItsChecksumHolds) {
  const std::string bytes = KeptFile();
  const size_t first_payload = 8 + kHeaderBytes;
  const size_t second_payload = first_payload + 5000 + kHeaderBytes;
  auto read = [](const std::string& contents, Region& into) {
    UniqueFd file = FileWith(contents);
    return ReadSnapshotFile(file.get(), JobHash("after"), 1, 2, into.map);
  };
  {
    // A flipped byte in the second record's payload: the first record stays, the second is refused.
    std::string bad = bytes;
    bad[second_payload + 100] ^= 1;
    Region region = MakeRegion();
    EXPECT_THAT(read(bad, region), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("step 6 fails its checksum")));
    std::optional<SlotHeader> newest = Newest(ReadHeaders(region.fd.get()));
    ASSERT_TRUE(newest.has_value());
    EXPECT_EQ(newest->step, 5);
  }
  {
    Region region = MakeRegion();
    EXPECT_THAT(read("not a snapshot at all", region), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a dtrun")));
    EXPECT_THAT(read("", region), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a dtrun")));
    std::string header_flip = bytes;
    header_flip[8 + 40] ^= 1;  // inside the first header's fixed part
    EXPECT_THAT(read(header_flip, region), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("snapshot header")));
    EXPECT_THAT(read(bytes + bytes.substr(8), region), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than 2")));
  }
  // Cut anywhere: refused or (cut between records) shorter, never a record half read.
  std::vector<size_t> cuts = {8, first_payload + 5000};  // after the magic; between the records
  for (size_t cut = 9; cut < bytes.size(); cut += 997) cuts.push_back(cut);
  for (size_t cut : cuts) {
    Region region = MakeRegion();
    absl::StatusOr<std::vector<SlotHeader>> placed = read(bytes.substr(0, cut), region);
    if (placed.ok()) {
      EXPECT_THAT(Steps(*placed), cut == 8 ? std::vector<int64_t>{} : std::vector<int64_t>{5}) << "cut at " << cut;
      EXPECT_TRUE(cut == 8 || cut == first_payload + 5000) << "cut at " << cut;
    } else {
      EXPECT_THAT(placed, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut short"))) << "cut at " << cut;
    }
    for (int slot = 0; slot < kSlots; ++slot) {
      absl::StatusOr<SlotHeader> h = region.map.Header(slot);
      if (h.ok()) {
        EXPECT_TRUE(region.map.Verify(slot, *h).ok()) << "cut at " << cut;
      }
    }
  }
}

TEST(SnapshotFileTest, ASnapshotLargerThanTheSlotNamesTheFlagToRaise) {
  Region big = MakeRegion(4 << 20);
  Put(big.map, "job", 1, 9, 1500000);
  UniqueFd file = MemoryFile();
  ASSERT_TRUE(WriteSnapshotFile(big.map, JobHash("job"), file.get()).ok());
  Region small = MakeRegion(1 << 20);
  EXPECT_THAT(ReadSnapshotFile(file.get(), JobHash("job"), 1, 2, small.map),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("raise dtrun --snapshot-memory")));
  EXPECT_FALSE(Newest(ReadHeaders(small.fd.get())).has_value());
}

}  // namespace
}  // namespace dtrun::snapshot
