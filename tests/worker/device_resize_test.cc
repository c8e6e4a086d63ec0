#include "worker/device_resize.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/resize_check.h"
#include "worker/data/transforms.h"

namespace dtrun::worker {
namespace {

TEST(CropAndResizeTest, TheWholeImageAtItsOwnSizeIsTheImage) {
  const torch::Tensor image = torch::randint(0, 256, {24, 24, 3}, torch::kUInt8);
  const torch::Tensor out = CropAndResize(image, data::Box{0, 0, 24, 24}, 24);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{24, 24, 3}));
  EXPECT_TRUE(out.round().to(torch::kUInt8).equal(image));
}

// The loader's resampler on the same box, to float rounding: whole-pixel training crops,
// fractional centre crops, shrinking and enlarging, and boxes that reach past the image.
TEST(CropAndResizeTest, ResizesAsTheLoadersResamplerDoes) {
  torch::manual_seed(3);
  const torch::Tensor image = torch::randint(0, 256, {37, 53, 3}, torch::kUInt8);
  const std::vector<std::pair<data::Box, int>> cases = {
      {{0, 0, 53, 37}, 16},                       // the whole image, shrunk
      {{5, 3, 20, 30}, 24},                       // a training crop
      {data::CenterCropBox(53, 37, 18, 16), 16},  // validation: fractional
      {{10.25, 2.5, 7.5, 9.75}, 20},              // enlarged
      {{40, -4, 30, 50}, 8},                      // past two edges
  };
  for (const auto& [box, size] : cases) {
    SCOPED_TRACE(::testing::Message() << "box " << box.x << "," << box.y << " " << box.w << "x" << box.h << " to "
                                      << size);
    const testing::ResizeDiff diff = testing::DiffFromLoadersResampler(image, box, size, torch::kCPU);
    EXPECT_LE(diff.max, 1);
    EXPECT_LT(diff.mean, 0.01f);
  }
}

// A batch's crops share one DeviceResampler; each is resized as on its own.
TEST(DeviceResamplerTest, EachCropOfABatchIsResizedAsOnItsOwn) {
  torch::manual_seed(4);
  const std::vector<torch::Tensor> images = {torch::randint(0, 256, {30, 41, 3}, torch::kUInt8),
                                             torch::randint(0, 256, {64, 20, 3}, torch::kUInt8)};
  const std::vector<DeviceResampler::Crop> crops = {{30, 41, data::Box{3, 2, 35, 25}},
                                                    {64, 20, data::CenterCropBox(20, 64, 14, 12)}};
  const DeviceResampler batch(crops, 12, torch::kCPU);
  for (size_t i = 0; i < crops.size(); ++i) {
    EXPECT_TRUE(batch.Resize(i, images[i]).allclose(CropAndResize(images[i], crops[i].box, 12))) << "crop " << i;
  }
}

}  // namespace
}  // namespace dtrun::worker
