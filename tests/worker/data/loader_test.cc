#include "worker/data/loader.h"

#include "gtest/gtest.h"
#include "tests/support/process_harness.h"
#include "tests/worker/data/data_test_util.h"

namespace dtrun::data {
namespace {

using dtrun::testing::MakeTempDir;
using testing::AllBatches;
using testing::Jpeg;
using testing::WriteFile;

constexpr int64_t kOneMegapixel = 1 << 20;

std::unique_ptr<Dataset> SmallFolder(int per_class, bool with_bad) {
  std::string root = MakeTempDir() + "/ds";
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < per_class; ++i) {
      WriteFile(root + "/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg", Jpeg(40 + i, 30 + c, c * 100 + i));
    }
  }
  if (with_bad) {
    std::string j = Jpeg(40, 40);
    WriteFile(root + "/c0/bad_truncated.jpg", j.substr(0, j.size() / 3));
    WriteFile(root + "/c1/bad_garbage.jpg", "garbage, not a jpeg");
    WriteFile(root + "/c1/grey.jpg", testing::JpegWithFormat(24, 24, TJPF_GRAY, TJSAMP_GRAY));
    WriteFile(root + "/c1/png_named.jpg", testing::Png(24, 24));
  }
  return std::move(OpenImageFolder(root).value());
}

TEST(LoaderTest, BatchesHaveTheRightShapesAndLabels) {
  auto ds = SmallFolder(6, false);
  LoaderOptions o;
  o.batch_size = 5;
  o.image_size = 32;
  std::vector<Batch> batches = AllBatches(*ds, o, 0);
  ASSERT_EQ(batches.size(), 3u);  // 12 samples
  EXPECT_EQ(batches[2].count, 2);
  for (const Batch& b : batches) {
    EXPECT_EQ(b.pixels.size(), static_cast<size_t>(b.count) * 32 * 32 * 3);
    EXPECT_EQ(b.labels.size(), static_cast<size_t>(b.count));
    for (int64_t l : b.labels) EXPECT_TRUE(l == 0 || l == 1);
  }
}

TEST(LoaderTest, SameSeedSameBatchesWhateverTheThreadCount) {
  auto ds = SmallFolder(8, false);
  LoaderOptions o;
  o.batch_size = 4;
  o.image_size = 24;
  o.seed = 3;
  o.threads = 1;
  std::vector<Batch> one = AllBatches(*ds, o, 2);
  o.threads = 3;
  std::vector<Batch> three = AllBatches(*ds, o, 2);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].pixels, three[i].pixels);
    EXPECT_EQ(one[i].labels, three[i].labels);
  }
  o.seed = 4;
  EXPECT_NE(AllBatches(*ds, o, 2)[0].pixels, one[0].pixels);
}

TEST(LoaderTest, ResumingMidEpochGivesExactlyTheRemainingBatches) {
  auto ds = SmallFolder(10, false);
  LoaderOptions o;
  o.batch_size = 3;
  o.image_size = 16;
  std::vector<Batch> full = AllBatches(*ds, o, 1);
  std::vector<Batch> resumed = AllBatches(*ds, o, 1, 4);
  ASSERT_EQ(resumed.size(), full.size() - 4);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].index, full[i + 4].index);
    EXPECT_EQ(resumed[i].labels, full[i + 4].labels);
    EXPECT_EQ(resumed[i].pixels, full[i + 4].pixels);
  }
}

TEST(LoaderTest, CorruptFilesAreSkippedAndCountedOddFormatsDecoded) {
  auto ds = SmallFolder(3, true);  // 6 good + grey + png-named + 2 bad
  LoaderOptions o;
  o.batch_size = 4;
  o.image_size = 16;
  o.sampler.shuffle = false;
  Loader loader(*ds, o);
  loader.StartEpoch(0);
  int images = 0, skipped = 0;
  while (auto b = loader.Next()) {
    images += b->count;
    skipped += b->skipped;
  }
  EXPECT_EQ(images, 8);
  EXPECT_EQ(skipped, 2);
  EXPECT_EQ(loader.skipped_total(), 2);
}

// A consumer that decodes JPEGs itself gets each with the crop and flip the loader would have used:
// decoding it as the loader does gives the loader's own pixels, bit for bit. Grey, PNG and JPEGs
// over the size limit are decoded here, in their slots.
// Training (random crop and flip) and validation (centre crop) batches alike.
TEST(LoaderTest, HandedOnJpegsCarryWhatTheLoaderWouldHaveDecoded) {
  std::string root = MakeTempDir() + "/ds";
  for (int i = 0; i < 9; ++i) WriteFile(root + "/c" + std::to_string(i % 2) + "/" + std::to_string(i) + ".jpg", Jpeg(40 + 3 * i, 30 + i, i));
  WriteFile(root + "/c1/grey.jpg", testing::JpegWithFormat(24, 24, TJPF_GRAY, TJSAMP_GRAY));
  WriteFile(root + "/c0/png_named.jpg", testing::Png(24, 24));
  auto ds = std::move(OpenImageFolder(root).value());
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "training batches" : "validation batches");
    LoaderOptions o;
    o.batch_size = 4;
    o.image_size = 20;
    o.seed = 5;
    o.train = train;
    const std::vector<Batch> decoded = AllBatches(*ds, o, 1);
    o.hand_on_jpegs_up_to_pixels = 55 * 36;  // the largest three JPEGs stay with the loader
    const std::vector<Batch> handed_on = AllBatches(*ds, o, 1);

    ASSERT_EQ(decoded.size(), handed_on.size());
    const size_t image_bytes = 20 * 20 * 3;
    Decoder decoder;
    int encoded = 0, flipped = 0;
    for (size_t b = 0; b < decoded.size(); ++b) {
      const Batch& want = decoded[b];
      const Batch& got = handed_on[b];
      ASSERT_EQ(got.count, want.count);
      EXPECT_EQ(got.labels, want.labels);
      ASSERT_EQ(got.pixels.size(), got.pixel_slots.size() * image_bytes);
      std::vector<int> seen(static_cast<size_t>(got.count), 0);
      for (size_t k = 0; k < got.pixel_slots.size(); ++k) {
        const int slot = got.pixel_slots[k];
        ++seen[static_cast<size_t>(slot)];
        EXPECT_TRUE(std::equal(got.pixels.begin() + k * image_bytes, got.pixels.begin() + (k + 1) * image_bytes,
                               want.pixels.begin() + slot * image_bytes));
      }
      for (const EncodedSample& e : got.encoded) {
        ++seen[static_cast<size_t>(e.slot)];
        ++encoded;
        flipped += e.flip;
        EXPECT_LE(e.width * e.height, 55 * 36);
        std::vector<uint8_t> px(image_bytes);
        ASSERT_TRUE(DecodeAndCrop(decoder, e.bytes, e.box, e.flip, 20, px.data()).ok());
        EXPECT_TRUE(std::equal(px.begin(), px.end(), want.pixels.begin() + e.slot * image_bytes)) << "slot " << e.slot;
      }
      for (int n : seen) EXPECT_EQ(n, 1);  // every slot once, in `pixels` or in `encoded`
    }
    EXPECT_EQ(encoded, 6);  // 9 RGB JPEGs less the 3 over the limit; not the grey one, not the PNG
    if (!train) {
      EXPECT_EQ(flipped, 0);
    }
  }
}

TEST(LoaderTest, TheHandOnShareDecidesHowManyJpegsAreHandedOn) {
  auto ds = SmallFolder(40, false);  // 80 JPEGs
  LoaderOptions o;
  o.batch_size = 16;
  o.image_size = 8;
  o.hand_on_jpegs_up_to_pixels = kOneMegapixel;
  auto handed_on = [&](double share) {
    Loader loader(*ds, o);
    loader.SetHandOnShare(share);
    loader.StartEpoch(3);
    size_t n = 0;
    while (auto b = loader.Next()) {
      n += b->encoded.size();
      const size_t in_pixels = b->encoded.empty() ? static_cast<size_t>(b->count) : b->pixel_slots.size();
      EXPECT_EQ(b->encoded.size() + in_pixels, static_cast<size_t>(b->count));
    }
    return n;
  };
  EXPECT_EQ(handed_on(0.0), 0u);
  EXPECT_EQ(handed_on(1.0), 80u);
  const size_t half = handed_on(0.5);
  EXPECT_GT(half, 25u);
  EXPECT_LT(half, 55u);
  EXPECT_EQ(handed_on(0.5), half);
  EXPECT_LE(handed_on(0.25), half);  // a subset: the same hash under a lower bar
}

TEST(LoaderTest, ValidationIsDeterministicAndSyntheticDataNeedsNoFiles) {
  auto ds = SmallFolder(2, false);
  LoaderOptions o;
  o.train = false;
  o.image_size = 16;
  o.sampler.shuffle = false;
  o.seed = 1;
  auto a = AllBatches(*ds, o, 0);
  o.seed = 2;
  auto b = AllBatches(*ds, o, 5);
  EXPECT_EQ(a[0].pixels, b[0].pixels);  // no randomness in validation
  auto synthetic = MakeSyntheticDataset(10, 3);
  o.train = true;
  auto s = AllBatches(*synthetic, o, 0);
  ASSERT_FALSE(s.empty());
  EXPECT_EQ(s[0].count, 10);
}

TEST(LoaderTest, ShardedRanksCoverTheEpoch) {
  auto ds = SmallFolder(5, false);
  LoaderOptions o;
  o.batch_size = 2;
  o.image_size = 8;
  size_t total = 0;
  for (int r = 0; r < 3; ++r) {
    o.sampler.rank = r;
    o.sampler.world_size = 3;
    Loader loader(*ds, o);
    loader.StartEpoch(0);
    EXPECT_EQ(loader.samples_per_epoch(), 4u);  // ceil(10 / 3), padded
    while (auto b = loader.Next()) total += b->count;
  }
  EXPECT_EQ(total, 12u);
}

}  // namespace
}  // namespace dtrun::data
