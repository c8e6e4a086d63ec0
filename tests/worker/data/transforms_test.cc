#include "worker/data/transforms.h"

#include "gtest/gtest.h"
#include "tests/worker/data/data_test_util.h"

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

}  // namespace
}  // namespace dtrun::data
