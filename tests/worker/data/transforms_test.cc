#include "worker/data/transforms.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/data/data_test_util.h"
#include "worker/data/resample_rows.h"

namespace dtrun::data {
namespace {

TEST(TransformsTest, RandomResizedCropStaysInsideAndWithinScaleAndRatio) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    Box b = RandomResizedCropBox(500, 375, rng);
    ASSERT_GE(b.x, 0);
    ASSERT_GE(b.y, 0);
    ASSERT_LE(b.x + b.w, 500);
    ASSERT_LE(b.y + b.h, 375);
    double area = b.w * b.h / (500.0 * 375);
    ASSERT_GE(area, 0.07);  // rounding can shave a little off 0.08
    ASSERT_LE(b.w / b.h, 4.0 / 3.0 + 0.05);
    ASSERT_GE(b.w / b.h, 3.0 / 4.0 - 0.05);
  }
}

TEST(TransformsTest, RandomResizedCropFallsBackToACentredCrop) {
  std::mt19937_64 rng(1);
  Box b = RandomResizedCropBox(1000, 10, rng);  // no attempt can fit: ratio-clamped centre crop
  EXPECT_DOUBLE_EQ(b.h, 10);
  EXPECT_NEAR(b.w, 13, 1);
  EXPECT_NEAR(b.x, (1000 - b.w) / 2, 1);
}

TEST(TransformsTest, CenterCropBoxMatchesResize256CenterCrop224) {
  Box b = CenterCropBox(500, 375, 256, 224);  // resized to 341x256, crop at (58.5→58? round) , 16
  double s = 375.0 / 256;
  EXPECT_NEAR(b.h, 224 * s, 1e-6);
  EXPECT_NEAR(b.y, 16 * s, 1e-6);
  EXPECT_NEAR(b.x, std::round((341 - 224) / 2.0) * (500.0 / 341), 1e-6);
}

TEST(TransformsTest, ResizeCropShapesFlipAndConstantColour) {
  Image grey{8, 6, std::vector<uint8_t>(8 * 6 * 3, 77)};
  std::vector<uint8_t> out(5 * 4 * 3);
  ResizeCrop(grey, Box{1, 1, 6, 4}, 5, 4, false, out.data());
  for (uint8_t v : out) EXPECT_EQ(v, 77);  // filters preserve constants
  Image ramp{4, 1, {0, 0, 0, 80, 80, 80, 160, 160, 160, 240, 240, 240}};
  std::vector<uint8_t> a(4 * 3), b(4 * 3);
  ResizeCrop(ramp, Box{0, 0, 4, 1}, 4, 1, false, a.data());
  ResizeCrop(ramp, Box{0, 0, 4, 1}, 4, 1, true, b.data());
  EXPECT_EQ(a[0], 0);
  EXPECT_EQ(a[9], 240);
  EXPECT_EQ(b[0], a[9]);  // mirrored
}

// The filter as defined: for each output row, the vertical taps' weighted sum of the source rows
// (float, tap by tap), then for each output pixel the horizontal taps' weighted sum of those
// (channel by channel), rounded and clamped. ResizeCrop's own loops must give these bytes.
std::vector<uint8_t> TwoPassTriangleFilter(const Image& src, const Box& box, int out_w, int out_h, bool flip) {
  const ResampleTaps tx = ComputeResampleTaps(box.x, box.w, src.width, out_w);
  const ResampleTaps ty = ComputeResampleTaps(box.y, box.h, src.height, out_h);
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * 3);
  for (int oy = 0; oy < out_h; ++oy) {
    std::vector<float> column(static_cast<size_t>(src.width) * 3, 0.f);
    for (int k = 0; k < ty.count[oy]; ++k) {
      for (int i = 0; i < src.width * 3; ++i)
        column[i] += ty.weight[oy * ty.max_taps + k] * src.row(ty.start[oy] + k)[i];
    }
    for (int ox = 0; ox < out_w; ++ox) {
      for (int c = 0; c < 3; ++c) {
        float acc = 0;
        for (int k = 0; k < tx.count[ox]; ++k)
          acc += tx.weight[ox * tx.max_taps + k] * column[(tx.start[ox] + k) * 3 + c];
        out[(static_cast<size_t>(oy) * out_w + (flip ? out_w - 1 - ox : ox)) * 3 + c] =
            static_cast<uint8_t>(std::clamp(acc + 0.5f, 0.f, 255.f));
      }
    }
  }
  return out;
}

TEST(TransformsTest, ResizeCropGivesTheTwoPassTriangleFiltersBytes) {
  std::mt19937_64 rng(3);
  const Image src = testing::Noise(333, 251, 8);
  for (int trial = 0; trial < 60; ++trial) {
    const int out = trial % 4 == 0 ? 224 : trial % 4 == 1 ? 64 : trial % 4 == 2 ? 300 : 7;  // down and up
    const Box box = trial == 0 ? Box{0, 0, 333, 251} : RandomResizedCropBox(src.width, src.height, rng);
    const bool flip = trial % 3 == 0;
    std::vector<uint8_t> got(static_cast<size_t>(out) * out * 3);
    ResizeCrop(src, box, out, out, flip, got.data());
    ASSERT_EQ(got, TwoPassTriangleFilter(src, box, out, out, flip))
        << "crop " << box.x << "," << box.y << " " << box.w << "x" << box.h << " to " << out;
  }
}

// ResizeCrop runs the widest build of its loops the CPU has; each other build must give the same
// bytes, since another machine of the same job may run it.
TEST(TransformsTest, EveryBuildOfTheResamplersLoopsGivesTheSameBytes) {
  const std::vector<RowResampler> builds = RowResamplersForThisCpu();
  ASSERT_FALSE(builds.empty());
  EXPECT_STREQ(builds.front().isa, "portable");
  EXPECT_STREQ(FastestRowResampler().isa, builds.back().isa);
  std::mt19937_64 rng(5);
  const Image src = testing::Noise(419, 301, 9);
  for (int trial = 0; trial < 40; ++trial) {
    const int out = trial % 2 == 0 ? 224 : 97;
    const Box box = RandomResizedCropBox(src.width, src.height, rng);
    const bool flip = trial % 3 == 0;
    const std::vector<uint8_t> want = TwoPassTriangleFilter(src, box, out, out, flip);
    const ResampleTaps tx = ComputeResampleTaps(box.x, box.w, src.width, out);
    const ResampleTaps ty = ComputeResampleTaps(box.y, box.h, src.height, out);
    for (const RowResampler& build : builds) {
      std::vector<uint8_t> got(want.size());
      build.run(ImageRegion::Whole(src), tx, ty, flip, got.data());
      ASSERT_EQ(got, want) << build.isa << ": crop " << box.x << "," << box.y << " " << box.w << "x" << box.h;
    }
  }
}

}  // namespace
}  // namespace dtrun::data
