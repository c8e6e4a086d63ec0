#include "replica/replica_keeper.h"

#include "gtest/gtest.h"
#include "replica/replica_schedule.h"

namespace dtrun::replica {
namespace {

constexpr uint64_t kJob = 42;

Copy MakeCopy(int64_t rank, int64_t step, const std::string& payload, int64_t world = 4) {
  Copy c;
  c.header = snapshot::SlotHeader{kJob, rank, world, step, 0, payload.size(),
                                  snapshot::PayloadHash(payload.data(), payload.size()), 0};
  c.payload = payload;
  return c;
}

absl::StatusOr<Copy> Assemble(const Copy& c, std::vector<std::string> pieces, uint64_t cap = 1 << 20) {
  CopyAssembler a(kJob, cap);
  if (absl::Status st = a.Begin(c.header); !st.ok()) return st;
  for (const std::string& p : pieces) {
    if (absl::Status st = a.Add(p); !st.ok()) return st;
  }
  return a.Finish();
}

TEST(CopyAssemblerTest, RebuildsACopyFromItsPieces) {
  Copy c = MakeCopy(1, 7, "abcdefgh");
  absl::StatusOr<Copy> got = Assemble(c, {"abc", "", "defgh"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, "abcdefgh");
  EXPECT_EQ(got->header.step, 7);
}

TEST(CopyAssemblerTest, RefusesWhatDoesNotAddUp) {
  Copy c = MakeCopy(1, 7, "abcdefgh");
  EXPECT_EQ(Assemble(c, {"abcdefgh", "x"}).status().code(), absl::StatusCode::kOutOfRange);  // longer than declared
  EXPECT_EQ(Assemble(c, {"abcd"}).status().code(), absl::StatusCode::kDataLoss);            // short
  EXPECT_EQ(Assemble(c, {"abcdefgX"}).status().code(), absl::StatusCode::kDataLoss);        // corrupted on the way
  EXPECT_EQ(Assemble(c, {"abcdefgh"}, 4).status().code(), absl::StatusCode::kResourceExhausted);  // over the cap
  Copy other = c;
  other.header.job = kJob + 1;
  EXPECT_EQ(Assemble(other, {"abcdefgh"}).status().code(), absl::StatusCode::kInvalidArgument);  // another job
  Copy bad_rank = c;
  bad_rank.header.rank = 4;  // world size 4
  EXPECT_EQ(Assemble(bad_rank, {"abcdefgh"}).status().code(), absl::StatusCode::kInvalidArgument);
  CopyAssembler a(kJob, 100);
  EXPECT_EQ(a.Add("x").code(), absl::StatusCode::kFailedPrecondition);  // data before a header
}

// A header that declares the cap does not make the keeper reserve it: memory follows the bytes.
TEST(CopyAssemblerTest, ADeclaredSizeAloneTakesNoMemory) {
  Copy c = MakeCopy(0, 1, "");
  c.header.payload_bytes = uint64_t{1} << 40;
  CopyAssembler a(kJob, uint64_t{1} << 41);
  ASSERT_TRUE(a.Begin(c.header).ok());
  ASSERT_TRUE(a.Add("tiny").ok());
  EXPECT_EQ(a.Finish().status().code(), absl::StatusCode::kDataLoss);
}

TEST(CopyAssemblerTest, AReusedBufferKeepsItsMemoryButNotItsBytes) {
  std::string buffer(4096, 'x');
  const char* memory = buffer.data();
  Copy c = MakeCopy(1, 7, "abc");
  CopyAssembler a(kJob, 1 << 20);
  ASSERT_TRUE(a.Begin(c.header, std::move(buffer)).ok());
  ASSERT_TRUE(a.Add("abc").ok());
  absl::StatusOr<Copy> got = a.Finish();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, "abc");
  EXPECT_EQ(got->payload.data(), memory) << "the spare buffer's memory, not a fresh allocation";
}

TEST(ReplicaKeeperTest, ACopyLetGoBecomesTheSpareBufferOnceNoFetchHoldsIt) {
  ReplicaKeeper keeper(kJob, 1 << 20, 4);
  const std::string big(64 << 10, 'p');
  keeper.Keep(MakeCopy(2, 10, big));
  keeper.Keep(MakeCopy(2, 20, big));
  EXPECT_LT(keeper.SpareBuffer().capacity(), big.size()) << "nothing let go yet";
  std::vector<CopyPtr> fetching = keeper.Copies(2, 4);  // a Fetch sending steps 20 and 10
  keeper.Keep(MakeCopy(2, 30, big));                    // step 10 is replaced...
  EXPECT_LT(keeper.SpareBuffer().capacity(), big.size()) << "...but still being sent";
  fetching.clear();
  std::string spare = keeper.SpareBuffer();
  EXPECT_GE(spare.capacity(), big.size());
  EXPECT_LT(keeper.SpareBuffer().capacity(), big.size()) << "taken once";
  EXPECT_EQ(keeper.Copies(2, 4).size(), 2u);
  EXPECT_EQ(keeper.Copies(2, 4)[1]->payload, big) << "the copies kept are untouched";
}

TEST(ReplicaKeeperTest, KeepsTheNewestTwoPerRankAndIgnoresOlderOnes) {
  ReplicaKeeper k(kJob, 1 << 20, 8);
  EXPECT_EQ(k.Keep(MakeCopy(2, 10, "a")), 10);
  EXPECT_EQ(k.Keep(MakeCopy(2, 20, "b")), 20);
  EXPECT_EQ(k.Keep(MakeCopy(2, 30, "c")), 30);
  EXPECT_EQ(k.Keep(MakeCopy(2, 5, "old")), 30);   // older than both held: dropped
  EXPECT_EQ(k.Keep(MakeCopy(2, 30, "dup")), 30);  // the same step again: kept once
  std::vector<CopyPtr> copies = k.Copies(2, 4);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0]->header.step, 30);
  EXPECT_EQ(copies[0]->payload, "c");
  EXPECT_EQ(copies[1]->header.step, 20);
  EXPECT_TRUE(k.Copies(2, 8).empty());  // another world size: an elastic change
  EXPECT_TRUE(k.Copies(3, 4).empty());
}

TEST(ReplicaKeeperTest, HoldsAtMostItsRanksAndDropsTheLongestUntouched) {
  ReplicaKeeper k(kJob, 1 << 20, 2);
  k.Keep(MakeCopy(0, 1, "a"));
  k.Keep(MakeCopy(1, 1, "b"));
  k.Keep(MakeCopy(0, 2, "c"));  // rank 0 touched again
  k.Keep(MakeCopy(3, 1, "d"));  // rank 1 goes
  EXPECT_EQ(k.Summary().size(), 2u);
  EXPECT_TRUE(k.Copies(1, 4).empty());
  EXPECT_EQ(k.Copies(0, 4).size(), 2u);
}

TEST(CrossesBoundaryTest, EveryNodeChoosesTheSameStepsFromTheStepsAlone) {
  EXPECT_TRUE(CrossesBoundary(0, -1, 10));   // the first snapshot travels
  EXPECT_TRUE(CrossesBoundary(7, -1, 10));
  EXPECT_FALSE(CrossesBoundary(9, 7, 10));
  EXPECT_TRUE(CrossesBoundary(10, 9, 10));
  EXPECT_TRUE(CrossesBoundary(13, 8, 10));  // snapshots every 5 steps: the first past 10
  EXPECT_FALSE(CrossesBoundary(18, 13, 10));
  EXPECT_FALSE(CrossesBoundary(10, 10, 10));  // the same step again (a checkpoint after a snapshot)
  EXPECT_TRUE(CrossesBoundary(3, 2, 1));
}

}  // namespace
}  // namespace dtrun::replica
