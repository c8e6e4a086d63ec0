#include "worker/tensorboard.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"

namespace dtrun::worker {
namespace {

TEST(TensorBoardTest, Crc32cMatchesTheRfc3720Vectors) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

// A reader for what the writer produces: TFRecord frames (checked) and the Event fields we use.
struct Scalar {
  std::string tag;
  float value;
  int64_t step;
};

uint64_t ReadVarint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    uint8_t b = static_cast<uint8_t>(s[i++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

// Parses fields of one message: calls `on(field, wire_type, payload_or_value)`.
template <typename F>
void Fields(const std::string& m, F on) {
  size_t i = 0;
  while (i < m.size()) {
    uint64_t key = ReadVarint(m, i);
    int field = static_cast<int>(key >> 3), type = static_cast<int>(key & 7);
    if (type == 0) {
      on(field, type, std::to_string(ReadVarint(m, i)));
    } else if (type == 1 || type == 5) {
      size_t n = type == 1 ? 8 : 4;
      on(field, type, m.substr(i, n));
      i += n;
    } else {
      uint64_t n = ReadVarint(m, i);
      on(field, type, m.substr(i, n));
      i += n;
    }
  }
}

std::vector<Scalar> ReadScalars(const std::string& path, std::string* version) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  std::vector<Scalar> out;
  size_t pos = 0;
  while (pos + 12 <= data.size()) {
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, data.data() + pos, 8);
    std::memcpy(&len_crc, data.data() + pos + 8, 4);
    EXPECT_EQ(len_crc, MaskedCrc32c(data.substr(pos, 8)));
    std::string event = data.substr(pos + 12, len);
    std::memcpy(&data_crc, data.data() + pos + 12 + len, 4);
    EXPECT_EQ(data_crc, MaskedCrc32c(event));
    pos += 12 + len + 4;
    int64_t step = 0;
    Fields(event, [&](int f, int, const std::string& v) {
      if (f == 2) step = std::stoll(v);
      if (f == 3) *version = v;
      if (f == 5) {
        Fields(v, [&](int, int, const std::string& value) {
          Scalar s{"", 0, 0};
          Fields(value, [&](int vf, int, const std::string& x) {
            if (vf == 1) s.tag = x;
            if (vf == 2) std::memcpy(&s.value, x.data(), 4);
          });
          out.push_back(s);
        });
      }
    });
    if (!out.empty() && out.back().step == 0) out.back().step = step;
  }
  return out;
}

TEST(TensorBoardTest, WrittenScalarsParseBack) {
  std::string dir = dtrun::testing::MakeTempDir() + "/tb";
  std::string path;
  {
    EventWriter w(dir);
    ASSERT_TRUE(w.ok());
    w.AddScalar("train/loss", 2.5f, 10);
    w.AddScalar("val/top1", 61.25f, 20);
    path = w.path();
  }
  EXPECT_NE(path.find("events.out.tfevents."), std::string::npos);
  std::string version;
  std::vector<Scalar> s = ReadScalars(path, &version);
  EXPECT_EQ(version, "brain.Event:2");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].tag, "train/loss");
  EXPECT_FLOAT_EQ(s[0].value, 2.5f);
  EXPECT_EQ(s[0].step, 10);
  EXPECT_EQ(s[1].tag, "val/top1");
  EXPECT_FLOAT_EQ(s[1].value, 61.25f);
  EXPECT_EQ(s[1].step, 20);
}

}  // namespace
}  // namespace dtrun::worker
