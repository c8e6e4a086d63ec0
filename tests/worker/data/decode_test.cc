#include "worker/data/decode.h"

#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "tests/worker/data/data_test_util.h"

namespace dtrun::data {
namespace {

using testing::Jpeg;
using testing::JpegWithFormat;
using testing::Png;

TEST(DecoderTest, DecodesRgbJpegAtFullSize) {
  Decoder d;
  std::string j = Jpeg(64, 48);
  ASSERT_EQ(d.Info(j)->width, 64);
  double scale = 0;
  auto img = d.Decode(j, Box{0, 0, 64, 48}, 64, 48, &scale);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 64);
  EXPECT_EQ(img->height, 48);
  EXPECT_EQ(img->rgb.size(), 64u * 48 * 3);
  EXPECT_EQ(scale, 1.0);
}

TEST(DecoderTest, UsesDctScalingWhenTheCropIsMuchSmallerThanTheImage) {
  Decoder d;
  std::string j = Jpeg(800, 600);
  double scale = 0;
  auto img = d.Decode(j, Box{0, 0, 800, 600}, 224, 224, &scale);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(scale, 0.5);  // 1/4 would leave 200x150 < 224
  EXPECT_EQ(img->width, 400);
  std::string big = Jpeg(1800, 1800);
  ASSERT_TRUE(d.Decode(big, Box{0, 0, 1800, 1800}, 224, 224, &scale).ok());
  EXPECT_EQ(scale, 0.125);
  ASSERT_TRUE(d.Decode(big, Box{0, 0, 300, 300}, 224, 224, &scale).ok());  // a small crop needs full size
  EXPECT_EQ(scale, 1.0);
}

TEST(DecoderTest, GreyAndCmykJpegsComeOutRgb) {
  Decoder d;
  for (auto [fmt, samp] : {std::pair{TJPF_GRAY, TJSAMP_GRAY}, std::pair{TJPF_CMYK, TJSAMP_444}}) {
    std::string j = JpegWithFormat(32, 16, fmt, samp);
    auto img = d.Decode(j, Box{0, 0, 32, 16}, 32, 16);
    ASSERT_TRUE(img.ok()) << img.status();
    EXPECT_EQ(img->rgb.size(), 32u * 16 * 3);
  }
}

// What a GPU decoder may be handed: 3-component YCbCr with common chroma, nothing else.
TEST(DecoderTest, InfoSaysWhichJpegsArePlainYCbCr) {
  Decoder d;
  auto rgb = d.Info(testing::Jpeg(32, 16));
  ASSERT_TRUE(rgb.ok());
  EXPECT_TRUE(rgb->plain_ycbcr);
  auto rgb_444 = d.Info(JpegWithFormat(32, 16, TJPF_RGBX, TJSAMP_444));
  ASSERT_TRUE(rgb_444.ok());
  EXPECT_TRUE(rgb_444->plain_ycbcr);
  for (auto [fmt, samp] : {std::pair{TJPF_GRAY, TJSAMP_GRAY}, std::pair{TJPF_CMYK, TJSAMP_444},
                           std::pair{TJPF_RGBX, TJSAMP_411}}) {
    auto info = d.Info(JpegWithFormat(32, 16, fmt, samp));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_TRUE(info->jpeg);
    EXPECT_FALSE(info->plain_ycbcr) << "pixel format " << fmt << ", subsampling " << samp;
  }
  auto png = d.Info(Png(8, 8));
  ASSERT_TRUE(png.ok());
  EXPECT_FALSE(png->plain_ycbcr);
}

// A header that fails to parse must not spoil the decoder for the images after it (TurboJPEG
// 2.1's handle keeps the failed state).
TEST(DecoderTest, ACorruptHeaderDoesNotSpoilTheNextImage) {
  Decoder d;
  const std::string good = testing::Jpeg(64, 48);
  const std::string cut = good.substr(0, 200);  // inside the Huffman tables
  EXPECT_FALSE(d.Info(cut).ok());
  auto info = d.Info(good);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->width, 64);
  EXPECT_FALSE(d.Decode(cut, Box{0, 0, 64, 48}, 64, 48).ok());
  EXPECT_TRUE(d.Decode(good, Box{0, 0, 64, 48}, 64, 48).ok());
}

TEST(DecoderTest, PngWithAJpegNameIsDecoded) {
  Decoder d;
  std::string p = Png(20, 10);
  auto info = d.Info(p);
  ASSERT_TRUE(info.ok());
  EXPECT_FALSE(info->jpeg);
  auto img = d.Decode(p, Box{0, 0, 20, 10}, 20, 10);
  ASSERT_TRUE(img.ok()) << img.status();
  EXPECT_EQ(img->width, 20);
}

TEST(DecoderTest, CorruptAndTruncatedDataAreDataLoss) {
  Decoder d;
  std::string j = Jpeg(64, 64);
  std::string truncated = j.substr(0, j.size() / 2);
  EXPECT_EQ(d.Decode(truncated, Box{0, 0, 64, 64}, 64, 64).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(d.Info("definitely not an image").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(d.Info("").status().code(), absl::StatusCode::kDataLoss);
}

// Patches the size a JPEG's frame header (SOF0) or a PNG's IHDR claims, leaving the data small.
std::string ClaimSize(std::string image, uint16_t w, uint16_t h) {
  if (image.compare(1, 3, "PNG") == 0) {
    for (int i = 0; i < 4; ++i) {
      image[16 + i] = static_cast<char>((uint32_t{w} >> (24 - 8 * i)) & 0xFF);
      image[20 + i] = static_cast<char>((uint32_t{h} >> (24 - 8 * i)) & 0xFF);
    }
    return image;
  }
  size_t sof = image.find("\xFF\xC0");
  image[sof + 5] = static_cast<char>(h >> 8);
  image[sof + 6] = static_cast<char>(h & 0xFF);
  image[sof + 7] = static_cast<char>(w >> 8);
  image[sof + 8] = static_cast<char>(w & 0xFF);
  return image;
}

TEST(DecoderTest, HeadersClaimingHugeImagesAreRefusedBeforeAnyAllocation) {
  Decoder d;
  for (const std::string& bomb : {ClaimSize(Jpeg(64, 64), 16000, 16000), ClaimSize(Png(20, 10), 16000, 16000)}) {
    EXPECT_LT(bomb.size(), 64u << 10);
    absl::StatusOr<ImageInfo> info = d.Info(bomb);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kResourceExhausted) << info.status();
    EXPECT_NE(info.status().message().find("16000x16000"), absl::string_view::npos) << info.status();
    EXPECT_EQ(d.Decode(bomb, Box{0, 0, 64, 64}, 64, 64).status().code(), absl::StatusCode::kResourceExhausted);
  }
  // The budget is the caller's: a small one refuses ordinary images too.
  Decoder tiny(/*max_pixels=*/100);
  EXPECT_EQ(tiny.Info(Jpeg(64, 64)).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(d.Info(Jpeg(64, 64)).ok());
}

// A PNG chunk is 4 bytes of length, 4 of type, the data and a CRC.
std::string PngChunk(std::string_view type, std::string_view data, uint32_t claimed_length) {
  std::string c;
  for (int i = 0; i < 4; ++i) c.push_back(static_cast<char>((claimed_length >> (24 - 8 * i)) & 0xFF));
  c.append(type);
  c.append(data);
  c.append(4, '\0');  // stb does not check CRCs
  return c;
}

TEST(DecoderTest, ChunksClaimingMoreDataThanTheFileHoldsAreRefusedBeforeAnyAllocation) {
  // An 8x8 PNG whose IDAT claims 2 GiB - 1: stb used to reallocate that much before reading it.
  std::string ihdr("\0\0\0\x08\0\0\0\x08\x08\x02\0\0\0", 13);
  std::string bomb = std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr, 13) +
                     PngChunk("IDAT", "xx", 0x7FFFFFFF);
  Decoder d;
  ASSERT_TRUE(d.Info(bomb).ok());
  absl::StatusOr<Image> img = d.Decode(bomb, Box{0, 0, 8, 8}, 8, 8);
  ASSERT_FALSE(img.ok());
  // Bookworm's stb grows its buffer toward the claim, which the bounded allocator refuses; trixie's
  // stb refuses the chunk itself. Either way nothing near the claim is allocated.
  if (img.status().code() == absl::StatusCode::kResourceExhausted) {
    EXPECT_NE(img.status().message().find("8x8 pixels asks for a"), absl::string_view::npos) << img.status();
  } else {
    EXPECT_EQ(img.status().code(), absl::StatusCode::kDataLoss) << img.status();
    EXPECT_NE(img.status().message().find("IDAT size limit"), absl::string_view::npos) << img.status();
  }
}

TEST(DecoderTest, GifBmpAndPnmDecodeAndOtherFormatsAreNotImages) {
  const std::string gif("GIF89a\x01\0\x01\0\x80\0\0\xff\0\0\0\0\0,\0\0\0\0\x01\0\x01\0\0\x02\x02" "D\x01\0;", 35);
  const std::string ppm = std::string("P6\n2 1\n255\n") + std::string("\xff\0\0\0\xff\0", 6);
  std::string bmp;
  stbi_write_bmp_to_func([](void* ctx, void* data, int size) { static_cast<std::string*>(ctx)->append(static_cast<char*>(data), size); },
                         &bmp, 3, 2, 3, std::string(18, '\x7f').data());
  Decoder d;
  for (const auto& [image, w, h] : {std::tuple{gif, 1, 1}, std::tuple{ppm, 2, 1}, std::tuple{bmp, 3, 2}}) {
    absl::StatusOr<Image> img = d.Decode(image, Box{0, 0, double(w), double(h)}, w, h);
    ASSERT_TRUE(img.ok()) << img.status();
    EXPECT_EQ(img->width, w);
    EXPECT_EQ(img->height, h);
    EXPECT_EQ(img->rgb.size(), size_t(w) * h * 3);
  }
  EXPECT_EQ(d.Decode(ppm, Box{0, 0, 2, 1}, 2, 1)->rgb[0], 0xFF);  // red, then green
  EXPECT_EQ(d.Decode(ppm, Box{0, 0, 2, 1}, 2, 1)->rgb[4], 0xFF);
  // 16-bit PNM: this stb overreads its buffer converting grey to RGB, so it is refused.
  const std::string pgm16 = std::string("P5\n2 1\n1000\n") + std::string(4, '\x01');
  EXPECT_EQ(d.Decode(pgm16, Box{0, 0, 2, 1}, 2, 1).status().code(), absl::StatusCode::kDataLoss);
  // A headerless TGA: stb would have decoded these bytes as a 2x2 image of noise.
  const std::string tga("\0\0\x02\0\0\0\0\0\0\0\0\0\x02\0\x02\0\x18\0" "abcdefghijkl", 30);
  EXPECT_EQ(d.Info(tga).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace dtrun::data
