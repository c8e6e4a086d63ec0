#include "worker/data/decode.h"

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/data/data_test_util.h"
#include "worker/data/transforms.h"

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

// An RGB JPEG of `img` at any subsampling, baseline or progressive.
std::string JpegOf(const Image& img, int subsamp, bool progressive) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int flags = progressive ? TJFLAG_PROGRESSIVE : 0;
  EXPECT_EQ(tjCompress2(tj, img.rgb.data(), img.width, 0, img.height, TJPF_RGB, &out, &size, subsamp, 85, flags), 0);
  std::string s(reinterpret_cast<char*>(out), size);
  tjFree(out);
  tjDestroy(tj);
  return s;
}

// What the loader makes of a random crop: decoded alone, the crop's region resamples to the bytes
// the whole image gives, for every chroma subsampling, progressive files, grey and CMYK, odd
// sizes, crops at the edges and the DCT scales (an output of 48 or 24 px lets it decode at 1/2,
// 1/4 or 1/8).
TEST(DecoderTest, ACropsRegionDecodedAloneResamplesToTheBytesOfTheWholeImage) {
  std::vector<std::pair<std::string, std::string>> jpegs;
  for (auto [w, h] : {std::pair{500, 375}, std::pair{333, 517}, std::pair{97, 61}}) {
    const std::string size = std::to_string(w) + "x" + std::to_string(h);
    for (int samp : {TJSAMP_420, TJSAMP_422, TJSAMP_444, TJSAMP_440, TJSAMP_411}) {
      jpegs.emplace_back(size + " subsampling " + std::to_string(samp),
                         JpegOf(testing::Smooth(w, h, samp), samp, false));
    }
    jpegs.emplace_back(size + " noise 4:2:0", JpegOf(testing::Noise(w, h, 5), TJSAMP_420, false));
    jpegs.emplace_back(size + " progressive 4:2:0", JpegOf(testing::Smooth(w, h, 9), TJSAMP_420, true));
    jpegs.emplace_back(size + " grey", JpegWithFormat(w, h, TJPF_GRAY, TJSAMP_GRAY));
    jpegs.emplace_back(size + " CMYK", JpegWithFormat(w, h, TJPF_CMYK, TJSAMP_444));
  }
  Decoder whole, part;
  std::mt19937_64 rng(11);
  int compared = 0, smaller = 0;
  for (const auto& [name, jpeg] : jpegs) {
    absl::StatusOr<ImageInfo> info = whole.Info(jpeg);
    ASSERT_TRUE(info.ok()) << name << ": " << info.status();
    for (int trial = 0; trial < 12; ++trial) {
      const int out = trial % 3 == 0 ? 224 : trial % 3 == 1 ? 48 : 24;
      Box box = RandomResizedCropBox(info->width, info->height, rng);
      if (trial == 0) box = Box{0, 0, double(info->width), double(info->height)};
      if (trial == 1) box = CenterCropBox(info->width, info->height, 256, 224);
      const bool flip = trial % 2 == 1;
      double scale_whole = 0, scale_part = 0;
      absl::StatusOr<Image> img = whole.Decode(jpeg, box, out, out, &scale_whole);
      ASSERT_TRUE(img.ok()) << name << ": " << img.status();
      absl::StatusOr<ImageRegion> region = part.DecodeForResize(jpeg, box, out, out, &scale_part);
      ASSERT_TRUE(region.ok()) << name << ": " << region.status();
      ASSERT_EQ(scale_whole, scale_part) << name;
      EXPECT_EQ(region->full_width, img->width) << name;
      EXPECT_EQ(region->full_height, img->height) << name;
      const Box scaled{box.x * scale_part, box.y * scale_part, box.w * scale_part, box.h * scale_part};
      std::vector<uint8_t> from_whole(size_t(out) * out * 3), from_part(size_t(out) * out * 3);
      ResizeCrop(*img, scaled, out, out, flip, from_whole.data());
      ResizeCrop(*region, scaled, out, out, flip, from_part.data());
      ASSERT_EQ(from_whole, from_part) << name << ", crop " << box.x << "," << box.y << " " << box.w << "x" << box.h
                                       << " to " << out;
      ++compared;
      smaller += int64_t{region->width} * region->height < int64_t{img->width} * img->height;
    }
  }
  EXPECT_EQ(compared, int(jpegs.size()) * 12);
  EXPECT_GT(smaller, compared / 2);  // most crops decode less than the whole
}

// The region decoder reads bytes from anywhere: what TurboJPEG refuses, it refuses too.
TEST(DecoderTest, ACropsRegionOfCorruptDataIsDataLossAndTheNextImageDecodes) {
  Decoder d;
  const std::string j = Jpeg(128, 128);
  double scale = 0;
  // Cut in half: a crop of the bottom rows reaches where the file ends.
  EXPECT_EQ(d.DecodeForResize(j.substr(0, j.size() / 2), Box{0, 64, 128, 64}, 64, 64, &scale).status().code(),
            absl::StatusCode::kDataLoss);
  std::string flipped = j;
  for (size_t i = j.size() / 3; i < j.size() / 3 + 64; ++i) flipped[i] = static_cast<char>(flipped[i] ^ 0x5A);
  absl::StatusOr<ImageRegion> bad = d.DecodeForResize(flipped, Box{0, 0, 128, 128}, 64, 64, &scale);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << bad.status();
  EXPECT_EQ(d.DecodeForResize(ClaimSize(j, 16000, 16000), Box{0, 0, 64, 64}, 64, 64, &scale).status().code(),
            absl::StatusCode::kResourceExhausted);
  absl::StatusOr<ImageRegion> good = d.DecodeForResize(j, Box{0, 0, 128, 128}, 64, 64, &scale);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(scale, 0.5);  // 64 of 128 pixels is enough
  EXPECT_EQ(good->full_width, 64);
  // Not a JPEG: decoded whole.
  absl::StatusOr<ImageRegion> png = d.DecodeForResize(Png(20, 10), Box{0, 0, 20, 10}, 8, 8, &scale);
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->width, 20);
  EXPECT_EQ(png->x0, 0);
}

// A loader thread keeps its decoder for the whole run: one huge image must not pin its memory.
TEST(DecoderTest, AHugeImagesMemoryIsLetGoAtTheNextOrdinaryOne) {
  ScratchBuffer scratch;
  scratch.Reserve(1000);
  EXPECT_EQ(scratch.capacity(), 1000u);
  scratch.Reserve(500);
  EXPECT_EQ(scratch.capacity(), 1000u);  // kept: no allocation per image
  scratch.Reserve(ScratchBuffer::kKeptBytes * 4);
  EXPECT_EQ(scratch.capacity(), ScratchBuffer::kKeptBytes * 4);
  scratch.Reserve(2000);
  EXPECT_EQ(scratch.capacity(), 2000u);
}

}  // namespace
}  // namespace dtrun::data
