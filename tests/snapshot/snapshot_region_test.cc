// The snapshot region shared by an agent and its workers: headers round-trip and refuse damage,
// a writer alternates slots and leaves the other whole, the payload table refuses lies.
#include "snapshot/snapshot_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "snapshot/payload_toc.h"
#include "tests/support/status_matchers.h"

namespace dtrun::snapshot {
namespace {

SlotHeader Header(int64_t step, uint64_t bytes = 64) {
  SlotHeader h;
  h.job = JobHash("job");
  h.rank = 1;
  h.world_size = 2;
  h.step = step;
  h.payload_bytes = bytes;
  h.payload_hash = 42;
  return h;
}

TEST(SnapshotHeaderTest, RoundTripsAndRefusesEveryDamagedByte) {
  const std::string bytes = EncodeHeader(Header(7));
  absl::StatusOr<SlotHeader> h = DecodeHeader(bytes, 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->step, 7);
  EXPECT_EQ(h->rank, 1);
  EXPECT_EQ(h->job, JobHash("job"));
  // Any flipped bit in the fixed part is caught (magic, version or checksum).
  for (size_t i = 0; i < 88; ++i) {  // the fixed part: 88 bytes
    std::string bad = bytes;
    bad[i] ^= 0x10;
    EXPECT_THAT(DecodeHeader(bad, 1 << 20),
                ::dtrun::testing::StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr("snapshot")))
        << "byte " << i;
  }
  EXPECT_TRUE(absl::IsNotFound(DecodeHeader(std::string(kHeaderBytes, '\0'), 1 << 20).status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeHeader(bytes.substr(0, 10), 1 << 20).status()));
  // A payload larger than its slot is refused, whatever the checksum says.
  EXPECT_TRUE(absl::IsDataLoss(DecodeHeader(EncodeHeader(Header(7, 1 << 21)), 1 << 20).status()));
}

TEST(SnapshotRegionTest, WriterAlternatesSlotsAndACrashMidWriteLeavesTheOtherWhole) {
  absl::StatusOr<UniqueFd> fd = CreateRegion(1 << 20, "test");
  ASSERT_TRUE(fd.ok()) << fd.status();
  // Sealed: the worker cannot grow it past the cap.
  EXPECT_NE(::ftruncate(fd->get(), 2 << 20), 0);
  absl::StatusOr<MappedRegion> region = MappedRegion::Map(fd->get());
  ASSERT_TRUE(region.ok()) << region.status();
  auto headers = [&] { return ReadHeaders(fd->get()); };
  EXPECT_FALSE(Newest(headers()).has_value());

  for (int64_t step : {1, 2, 3}) {
    const int slot = SlotToWrite(headers(), step);
    region->Invalidate(slot);
    ASSERT_TRUE(region->Reserve(slot, 100).ok());
    std::memset(region->Payload(slot), static_cast<int>(step), 100);
    SlotHeader h = Header(step, 100);
    h.payload_hash = PayloadHash(region->Payload(slot), 100);
    region->Commit(slot, h);
    ASSERT_TRUE(region->Verify(slot, h).ok());
  }
  ASSERT_TRUE(Newest(headers()).has_value());
  EXPECT_EQ(Newest(headers())->step, 3);
  // Step 4 starts in the slot of step 2 and dies before its header: 3 is still there, whole.
  EXPECT_EQ(region->Header(SlotToWrite(headers(), 3))->step, 3);  // the same step again: its own slot
  const int slot = SlotToWrite(headers(), 4);
  EXPECT_EQ(region->Header(slot)->step, 2);
  region->Invalidate(slot);
  std::memset(region->Payload(slot), 4, 50);
  EXPECT_EQ(Newest(headers())->step, 3);
  // A flipped payload byte fails the checksum.
  const int other = 1 - slot;
  absl::StatusOr<SlotHeader> three = region->Header(other);
  ASSERT_TRUE(three.ok());
  region->Payload(other)[17] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(region->Verify(other, *three)));
  // More than a slot holds is refused before anything is written.
  EXPECT_TRUE(absl::IsResourceExhausted(region->Reserve(0, 1 << 20)));
}

TEST(SnapshotRegionTest, OnlyASealedRegionMaps) {
  char path[] = "/tmp/dtrun-snapshot-XXXXXX";
  int plain = ::mkstemp(path);
  ASSERT_GE(plain, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(plain, 1 << 20), 0);
  EXPECT_THAT(MappedRegion::Map(plain),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("snapshot")));
  EXPECT_THAT(ReadHeaders(plain)[0],
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("snapshot")));
  ::close(plain);
  EXPECT_THAT(CreateRegion(100, "tiny"),
              ::dtrun::testing::StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("snapshot")));
}

TensorRecord Record(const std::string& name, std::vector<int64_t> sizes) {
  TensorRecord r;
  r.name = name;
  r.dtype = 6;
  r.item_bytes = 4;
  r.sizes = sizes;
  r.strides.assign(sizes.size(), 1);
  for (int i = static_cast<int>(sizes.size()) - 2; i >= 0; --i) r.strides[i] = r.strides[i + 1] * sizes[i + 1];
  r.nbytes = *SpanBytes(r.sizes, r.strides, r.item_bytes);
  return r;
}

TEST(PayloadTocTest, RoundTripsAndRefusesRecordsOutsideThePayload) {
  std::vector<TensorRecord> records = {Record("param/w", {3, 4}), Record("scalar", {}), Record("empty", {0, 5})};
  const uint64_t total = LayOut(records);
  std::string payload(total, '\0');
  const std::string toc = EncodeToc(records);
  payload.replace(0, toc.size(), toc);
  absl::StatusOr<std::vector<TensorRecord>> back = DecodeToc(payload);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[0].name, "param/w");
  EXPECT_EQ((*back)[0].nbytes, 48u);
  EXPECT_EQ((*back)[1].nbytes, 4u);
  EXPECT_EQ((*back)[2].nbytes, 0u);
  EXPECT_EQ((*back)[0].offset % 64, 0u);
  // Cut anywhere, the table is refused rather than read past the end.
  for (size_t cut = 0; cut < toc.size(); ++cut) EXPECT_FALSE(DecodeToc(payload.substr(0, cut)).ok()) << cut;
  // A record claiming more bytes than the payload holds.
  std::vector<TensorRecord> lying = records;
  lying[0].sizes = {3000, 4};
  lying[0].strides = {4, 1};
  lying[0].nbytes = *SpanBytes(lying[0].sizes, lying[0].strides, 4);
  std::string bad = payload;
  const std::string bad_toc = EncodeToc(lying);
  bad.replace(0, bad_toc.size(), bad_toc);
  EXPECT_TRUE(absl::IsDataLoss(DecodeToc(bad).status()));
  EXPECT_FALSE(SpanBytes({int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 40, 1}, 4).has_value());
}

// What dtrun hands its workers' Python module (DTRUN_XXHASH_LIBRARY): the library it hashes with.
TEST(SnapshotRegionTest, TheLibxxhashFileIsTheOneThisProcessLoaded) {
  const std::string file = XxhashLibraryFile();
  ASSERT_NE(file.find("libxxhash"), std::string::npos) << file;
  EXPECT_TRUE(std::filesystem::exists(file)) << file;
}

TEST(PayloadTocTest, HashingInPiecesEqualsHashingTheWhole) {
  std::string data(10000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  PayloadHasher h;
  h.Update(data.data(), 3);
  h.Update(data.data() + 3, 0);
  h.Update(data.data() + 3, data.size() - 3);
  EXPECT_EQ(h.Digest(), PayloadHash(data.data(), data.size()));
}

}  // namespace
}  // namespace dtrun::snapshot
