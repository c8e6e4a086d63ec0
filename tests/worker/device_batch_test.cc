#include "worker/device_batch.h"

#include <algorithm>
#include <functional>
#include <memory>

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/worker/data/data_test_util.h"
#include "worker/data/dataset.h"

namespace dtrun::worker {
namespace {

using data::testing::SmoothJpeg;
using data::testing::WriteFile;

// The device decoder's stand-in on the CPU: whole images with TurboJPEG, as nvJPEG returns them.
class HostFullDecoder : public JpegBatchDecoder {
 public:
  std::function<bool(size_t)> refuse = [](size_t) { return false; };
  bool fail = false;
  bool wrong_size = false;
  std::shared_ptr<int> calls = std::make_shared<int>(0);  // outlives the decoder

  absl::StatusOr<std::vector<torch::Tensor>> Decode(const std::vector<std::string_view>& jpegs) override {
    ++*calls;
    if (fail) return absl::InternalError("a planted failure");
    std::vector<torch::Tensor> out(jpegs.size());
    for (size_t i = 0; i < jpegs.size(); ++i) {
      absl::StatusOr<data::ImageInfo> info = decoder_.Info(jpegs[i]);
      if (refuse(i) || !info.ok()) continue;
      const data::Box whole{0, 0, double(info->width), double(info->height)};
      absl::StatusOr<data::Image> img = decoder_.Decode(jpegs[i], whole, info->width, info->height);
      if (!img.ok()) continue;
      out[i] = torch::from_blob(img->rgb.data(), {img->height, img->width, 3}, torch::kUInt8).clone();
      if (wrong_size) out[i] = out[i].narrow(0, 0, img->height / 2);
    }
    return out;
  }
  std::string Describe() const override { return "the test's host decoder"; }

 private:
  data::Decoder decoder_;
};

// A folder of smooth JPEGs of assorted sizes in two classes, plus `extra` files.
std::unique_ptr<data::Dataset> Folder(int images, const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  const std::string root = dtrun::testing::MakeTempDir() + "/ds";
  for (int i = 0; i < images; ++i) {
    WriteFile(root + "/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".jpg",
              SmoothJpeg(48 + 7 * i, 40 + 5 * (i % 4), static_cast<uint64_t>(i)));
  }
  for (const auto& [name, bytes] : extra) WriteFile(root + "/" + name, bytes);
  return std::move(data::OpenImageFolder(root).value());
}

// Training batches (random crops and flips), or validation batches (centre crops) where !train.
std::vector<data::Batch> Epoch(const data::Dataset& ds, bool hand_on, bool train = true) {
  data::LoaderOptions o;
  o.train = train;
  o.batch_size = 4;
  // Validation's centre crops keep 7/8 of the shorter side, at most 48 pixels here: at 32 none of
  // them is decoded at half scale (libjpeg's DCT scaling), so both sides resample the same pixels.
  o.image_size = train ? 24 : 32;
  o.seed = 11;
  o.hand_on_jpegs_up_to_pixels = hand_on ? kDeviceDecodeMaxPixels : 0;
  return data::testing::AllBatches(ds, o, 2);
}

torch::Tensor LoaderPixels(const data::Batch& b) {
  return torch::from_blob(const_cast<uint8_t*>(b.pixels.data()), {b.count, b.image_size, b.image_size, 3},
                          torch::kUInt8)
      .clone();
}

// Decoded whole, cropped and resized on the device: the loader's pixels within a few levels (its
// JPEG decode may run at 1/2 scale), flips included; the validation's centre crops too.
TEST(DeviceBatchAssemblerTest, AssembledBatchesAreTheLoadersWithinAFewLevels) {
  auto ds = Folder(10, {{"c1/grey.jpg", data::testing::JpegWithFormat(30, 30, TJPF_GRAY, TJSAMP_GRAY)},
                        {"c0/png.png", data::testing::Png(30, 30)}});
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "training batches" : "validation batches");
    const std::vector<data::Batch> want = Epoch(*ds, false, train);
    std::vector<data::Batch> got = Epoch(*ds, true, train);
    auto decoder = std::make_unique<HostFullDecoder>();
    DeviceBatchAssembler assembler(std::move(decoder), torch::kCPU);
    ASSERT_EQ(got.size(), want.size());
    for (size_t b = 0; b < got.size(); ++b) {
      const torch::Tensor pixels = assembler.Assemble(got[b]);
      ASSERT_EQ(got[b].count, want[b].count);
      EXPECT_EQ(got[b].labels, want[b].labels);
      const torch::Tensor diff = (pixels.to(torch::kInt32) - LoaderPixels(want[b]).to(torch::kInt32)).abs();
      // Training crops may be decoded at half scale by the loader, not by the device.
      EXPECT_LT(diff.to(torch::kFloat32).mean().item<float>(), train ? 0.5f : 0.01f) << "batch " << b;
      EXPECT_LE(diff.max().item<int>(), train ? 8 : 1) << "batch " << b;
    }
    EXPECT_EQ(assembler.device_decoded(), 10);
    EXPECT_EQ(assembler.host_decoded(), 0);
    // One timing per batch, for the decode share; taken once.
    const std::vector<DeviceBatchAssembler::DeviceTiming> timings = assembler.TakeDeviceTimings();
    ASSERT_EQ(timings.size(), got.size());
    int images = 0;
    for (const auto& t : timings) {
      images += t.images;
      EXPECT_GT(t.seconds, 0);
    }
    EXPECT_EQ(images, 10);
    EXPECT_TRUE(assembler.TakeDeviceTimings().empty());
  }
}

// What the device decoder leaves is decoded on the host exactly as the loader would have.
TEST(DeviceBatchAssemblerTest, JpegsTheDecoderRefusesAreTheLoadersBitForBit) {
  auto ds = Folder(8);
  const std::vector<data::Batch> want = Epoch(*ds, false);
  std::vector<data::Batch> got = Epoch(*ds, true);
  auto decoder = std::make_unique<HostFullDecoder>();
  decoder->refuse = [](size_t i) { return i % 2 == 1; };
  DeviceBatchAssembler assembler(std::move(decoder), torch::kCPU);
  for (size_t b = 0; b < got.size(); ++b) {
    const torch::Tensor pixels = assembler.Assemble(got[b]);
    const torch::Tensor loader = LoaderPixels(want[b]);
    const std::vector<data::EncodedSample>& encoded = got[b].encoded;
    for (size_t i = 1; i < encoded.size(); i += 2) {  // the refused ones
      EXPECT_TRUE(pixels[encoded[i].slot].equal(loader[encoded[i].slot])) << "batch " << b << " slot " << encoded[i].slot;
    }
  }
  EXPECT_EQ(assembler.device_decoded(), 4);
  EXPECT_EQ(assembler.host_decoded(), 4);
}

TEST(DeviceBatchAssemblerTest, AFailingDecoderLeavesItsBatchesToTheHostAndIsDroppedAfterThreeInARow) {
  auto ds = Folder(16);  // 4 batches
  const std::vector<data::Batch> want = Epoch(*ds, false);
  std::vector<data::Batch> got = Epoch(*ds, true);
  auto decoder = std::make_unique<HostFullDecoder>();
  decoder->fail = true;
  const std::shared_ptr<int> calls = decoder->calls;
  DeviceBatchAssembler assembler(std::move(decoder), torch::kCPU);
  for (size_t b = 0; b < got.size(); ++b) {
    EXPECT_TRUE(assembler.Assemble(got[b]).equal(LoaderPixels(want[b]))) << "batch " << b;
    if (b + 1 == DeviceBatchAssembler::kFailuresBeforeGivingUp) {
      EXPECT_EQ(*calls, DeviceBatchAssembler::kFailuresBeforeGivingUp);
      EXPECT_FALSE(assembler.decoder_in_use());
    }
  }
  EXPECT_EQ(*calls, DeviceBatchAssembler::kFailuresBeforeGivingUp);  // not asked again
  EXPECT_EQ(assembler.host_decoded(), 16);
}

TEST(DeviceBatchAssemblerTest, ImagesOfAnotherSizeThanTheHeaderSaysAreDecodedOnTheHost) {
  auto ds = Folder(4);
  const std::vector<data::Batch> want = Epoch(*ds, false);
  std::vector<data::Batch> got = Epoch(*ds, true);
  auto decoder = std::make_unique<HostFullDecoder>();
  decoder->wrong_size = true;
  DeviceBatchAssembler assembler(std::move(decoder), torch::kCPU);
  EXPECT_TRUE(assembler.Assemble(got[0]).equal(LoaderPixels(want[0])));
  EXPECT_EQ(assembler.device_decoded(), 0);
  EXPECT_EQ(assembler.host_decoded(), 4);
}

// A JPEG whose header reads but whose data is cut short: the loader hands it on, nobody decodes
// it, and it leaves the batch with its label, counted, as the loader itself would have skipped it.
TEST(DeviceBatchAssemblerTest, AJpegNobodyCanDecodeLeavesTheBatchWithItsLabel) {
  const std::string jpeg = data::testing::Jpeg(64, 48);  // noise: the header is a small part of it
  auto ds = Folder(6, {{"c1/truncated.jpg", jpeg.substr(0, jpeg.size() * 2 / 3)}});
  const std::vector<data::Batch> want = Epoch(*ds, false);
  std::vector<data::Batch> got = Epoch(*ds, true);
  DeviceBatchAssembler assembler(std::make_unique<HostFullDecoder>(), torch::kCPU);
  int skipped = 0, images = 0;
  std::vector<int64_t> want_labels, got_labels;
  for (const data::Batch& b : want) want_labels.insert(want_labels.end(), b.labels.begin(), b.labels.end());
  for (data::Batch& b : got) {
    const torch::Tensor pixels = assembler.Assemble(b);
    EXPECT_EQ(pixels.size(0), b.count);
    EXPECT_EQ(b.labels.size(), static_cast<size_t>(b.count));
    skipped += b.skipped;
    images += b.count;
    got_labels.insert(got_labels.end(), b.labels.begin(), b.labels.end());
  }
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(images, 6);
  EXPECT_EQ(got_labels, want_labels);
}

}  // namespace
}  // namespace dtrun::worker
