#include "worker/zip_check.h"

#include <zlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// A zip written byte by byte, as PyTorch's writer lays one out: local header and data per member,
// then the central directory and its end record. Fields can be bent afterwards to build damage.
struct Member {
  std::string name;
  std::string data;
  bool deflate = false;
  bool zip64_sizes = false;  // 0xFFFFFFFF sizes in the directory, the real ones in a zip64 extra
};

void Le(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint32_t Crc(const std::string& s) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(s.data()), s.size()));
}

std::string RawDeflate(const std::string& s) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, s.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = static_cast<uInt>(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Layout {
  std::string bytes;
  std::vector<std::pair<size_t, size_t>> data;  // each member's data: [begin, end)
};

// Each member is listed `times_listed` times in the directory, every entry pointing at its one copy.
Layout Zip(const std::vector<Member>& members, int times_listed = 1) {
  Layout z;
  std::string directory;
  for (const Member& m : members) {
    const std::string stored = m.deflate ? RawDeflate(m.data) : m.data;
    const uint64_t local = z.bytes.size();
    Le(&z.bytes, 0x04034b50, 4);
    Le(&z.bytes, 20, 2);
    Le(&z.bytes, 0, 2);
    Le(&z.bytes, m.deflate ? 8 : 0, 2);
    Le(&z.bytes, 0, 4);  // time, date
    Le(&z.bytes, Crc(m.data), 4);
    Le(&z.bytes, stored.size(), 4);
    Le(&z.bytes, m.data.size(), 4);
    Le(&z.bytes, m.name.size(), 2);
    Le(&z.bytes, 0, 2);
    z.bytes += m.name;
    z.data.emplace_back(z.bytes.size(), z.bytes.size() + stored.size());
    z.bytes += stored;
    std::string extra;
    if (m.zip64_sizes) {
      Le(&extra, 0x0001, 2);
      Le(&extra, 16, 2);
      Le(&extra, m.data.size(), 8);
      Le(&extra, stored.size(), 8);
    }
    for (int k = 0; k < times_listed; ++k) {
      Le(&directory, 0x02014b50, 4);
      Le(&directory, 20, 2);
      Le(&directory, 20, 2);
      Le(&directory, 0, 2);
      Le(&directory, m.deflate ? 8 : 0, 2);
      Le(&directory, 0, 4);
      Le(&directory, Crc(m.data), 4);
      Le(&directory, m.zip64_sizes ? 0xFFFFFFFF : stored.size(), 4);
      Le(&directory, m.zip64_sizes ? 0xFFFFFFFF : m.data.size(), 4);
      Le(&directory, m.name.size(), 2);
      Le(&directory, extra.size(), 2);
      Le(&directory, 0, 2);  // comment
      Le(&directory, 0, 2);  // disk
      Le(&directory, 0, 2);  // internal attributes
      Le(&directory, 0, 4);  // external attributes
      Le(&directory, local, 4);
      directory += m.name;
      directory += extra;
    }
  }
  const uint64_t directory_at = z.bytes.size();
  z.bytes += directory;
  Le(&z.bytes, 0x06054b50, 4);
  Le(&z.bytes, 0, 4);  // disks
  Le(&z.bytes, members.size() * times_listed, 2);
  Le(&z.bytes, members.size() * times_listed, 2);
  Le(&z.bytes, directory.size(), 4);
  Le(&z.bytes, directory_at, 4);
  Le(&z.bytes, 0, 2);
  return z;
}

std::vector<Member> ACheckpoint() {
  return {{"archive/data.pkl", std::string(300, 'p')},
          {"archive/data/0", std::string(4096, '\x3f')},
          {"archive/code/model.py", "def forward(self, x):\n    return x\n" + std::string(500, ' '), true}};
}

TEST(ZipCheckTest, AWellFormedZipOfStoredAndDeflatedMembersPasses) {
  EXPECT_TRUE(VerifyZipChecksums(Zip(ACheckpoint()).bytes).ok());
}

TEST(ZipCheckTest, Zip64SizesInAnExtraFieldAreRead) {
  std::vector<Member> members = ACheckpoint();
  for (Member& m : members) m.zip64_sizes = true;
  EXPECT_TRUE(VerifyZipChecksums(Zip(members).bytes).ok());
}

TEST(ZipCheckTest, EveryChangedByteOfAMembersDataIsDataLoss) {
  const Layout good = Zip(ACheckpoint());
  for (size_t m = 0; m < good.data.size(); ++m) {
    for (size_t at = good.data[m].first; at < good.data[m].second; at += 7) {
      std::string bad = good.bytes;
      bad[at] ^= 0x20;
      absl::Status s = VerifyZipChecksums(bad);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "member " << m << ", byte " << at;
    }
  }
}

TEST(ZipCheckTest, EveryTruncationIsDataLoss) {
  const std::string good = Zip(ACheckpoint()).bytes;
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_EQ(VerifyZipChecksums(good.substr(0, n)).code(), absl::StatusCode::kDataLoss) << n << " bytes";
  }
}

TEST(ZipCheckTest, ADirectoryListingOneMembersBytesManyTimesIsRefused) {
  // 200 entries over one 4 KiB member: a check per entry would read 800 KiB of a 14 KiB file.
  absl::Status s = VerifyZipChecksums(Zip({{"archive/data/0", std::string(4096, 'x')}}, 200).bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("overlaps"), absl::string_view::npos) << s;
}

TEST(ZipCheckTest, AnUnknownCompressionMethodIsNamed) {
  std::string bytes = Zip({{"archive/data.pkl", "x"}}).bytes;
  const size_t entry = bytes.find("PK\x01\x02");
  bytes[entry + 10] = 12;  // bzip2
  absl::Status s = VerifyZipChecksums(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("archive/data.pkl: unknown compression method 12"), absl::string_view::npos) << s;
}

TEST(ZipCheckTest, ADeflatedMemberThatInflatesPastItsSizeIsRefused) {
  std::string bytes = Zip({{"archive/code/m.py", std::string(1000, 'a'), true}}).bytes;
  const size_t entry = bytes.find("PK\x01\x02");
  bytes[entry + 24] = static_cast<char>(999 & 0xFF);  // the uncompressed size, one byte short
  bytes[entry + 25] = static_cast<char>(999 >> 8);
  absl::Status s = VerifyZipChecksums(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("does not inflate"), absl::string_view::npos) << s;
}

TEST(ZipCheckTest, AnEmptyZipIsNotACheckpoint) {
  EXPECT_EQ(VerifyZipChecksums(Zip({}).bytes).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(VerifyZipChecksums("").code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace dtrun::worker
