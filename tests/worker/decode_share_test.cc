#include "worker/decode_share.h"

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

TEST(DecodeShareTest, BeforeBothSidesAreMeasuredTheGpuGetsMostButNotAll) {
  DecodeShare share(6);
  EXPECT_EQ(share.share(), DecodeShare::kInitial);
  share.ObserveDevice(200, 0.04);
  EXPECT_EQ(share.share(), DecodeShare::kInitial);  // the loader not yet measured
}

// A GPU decoding 5,000 images/s beside 6 threads at 440/s each (2,640): the GPU takes 5000/7640.
TEST(DecodeShareTest, TheGpuGetsItsShareOfTheCombinedThroughput) {
  DecodeShare share(6);
  share.ObserveDevice(200, 200 / 5000.0);
  share.ObserveLoader(50, 50 / 440.0);
  EXPECT_NEAR(share.share(), 5000.0 / 7640.0, 1e-9);
}

TEST(DecodeShareTest, MeasurementsAreSmoothedSoOneSlowBatchMovesItLittle) {
  DecodeShare share(4);
  share.ObserveDevice(100, 0.02);
  share.ObserveLoader(100, 0.2);
  const double before = share.share();
  share.ObserveDevice(100, 0.2);  // one batch ten times slower (the GPU busy with something else)
  EXPECT_LT(share.share(), before);
  EXPECT_GT(share.share(), before - 0.2);
  for (int i = 0; i < 100; ++i) share.ObserveDevice(100, 0.2);  // it stays slow: the share follows
  EXPECT_NEAR(share.share(), (100 / 0.2) / (100 / 0.2 + 4 * 100 / 0.2), 1e-3);
}

TEST(DecodeShareTest, TheShareStaysWithinItsBoundsAndAFixedOneIsKept) {
  DecodeShare slow_gpu(16);
  slow_gpu.ObserveDevice(10, 10.0);
  slow_gpu.ObserveLoader(10, 0.001);
  EXPECT_EQ(slow_gpu.share(), DecodeShare::kMin);
  DecodeShare fixed(6, 0.5);
  fixed.ObserveDevice(10, 10.0);
  fixed.ObserveLoader(10, 0.001);
  EXPECT_EQ(fixed.share(), 0.5);
  EXPECT_TRUE(fixed.fixed());
  EXPECT_EQ(DecodeShare(2, 3.0).share(), 1.0);  // clamped
}

TEST(DecodeShareTest, EmptyOrZeroTimedObservationsAreIgnored) {
  DecodeShare share(2);
  share.ObserveDevice(0, 1.0);
  share.ObserveLoader(10, 0.0);
  EXPECT_EQ(share.share(), DecodeShare::kInitial);
}

}  // namespace
}  // namespace dtrun::worker
