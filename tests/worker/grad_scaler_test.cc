#include "worker/grad_scaler.h"

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

std::vector<torch::Tensor> ParamsWithGrad(float g) {
  torch::Tensor p = torch::zeros({3}, torch::requires_grad());
  p.mutable_grad() = torch::full({3}, g);
  return {p};
}

TEST(GradScalerTest, OverflowSkipsTheStepAndHalvesTheScale) {
  GradScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(s.UnscaleAndUpdate(ParamsWithGrad(std::numeric_limits<float>::infinity()), nullptr));
  EXPECT_NE(
      ::testing::internal::GetCapturedStdout().find("Gradient overflow. Skipping step, loss scale reduced to 32768"),
      std::string::npos);
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_FALSE(s.UnscaleAndUpdate(ParamsWithGrad(std::nanf("")), nullptr));
  EXPECT_EQ(s.scale(), 16384.0);
}

TEST(GradScalerTest, UnscalesAndGrowsAfterTheGrowthInterval) {
  GradScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  GradScaler s(o);
  auto params = ParamsWithGrad(16);
  EXPECT_TRUE(s.UnscaleAndUpdate(params, nullptr));
  EXPECT_TRUE(torch::allclose(params[0].grad(), torch::full({3}, 2.0f)));  // 16 / 8
  EXPECT_EQ(s.Scale(torch::ones({1})).item<float>(), 8.0f);
  EXPECT_TRUE(s.UnscaleAndUpdate(ParamsWithGrad(1), nullptr));
  EXPECT_TRUE(s.UnscaleAndUpdate(ParamsWithGrad(1), nullptr));
  EXPECT_EQ(s.scale(), 16.0);  // doubled after 3 clean steps
}

TEST(GradScalerTest, AnOverflowOnAnyRankSkipsEverywhere) {
  GradScaler s;
  bool asked = false;
  EXPECT_FALSE(s.UnscaleAndUpdate(ParamsWithGrad(1), [&](bool mine) {
    asked = true;
    EXPECT_FALSE(mine);
    return true;  // another rank overflowed
  }));
  EXPECT_TRUE(asked);
  EXPECT_EQ(s.scale(), 32768.0);
}

TEST(GradScalerTest, StateRoundTripsThroughACheckpointArchive) {
  GradScaler a;
  a.UnscaleAndUpdate(ParamsWithGrad(INFINITY), nullptr);
  torch::serialize::OutputArchive out;
  a.Save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  std::istringstream is(bytes.str());
  in.load_from(is);
  GradScaler b;
  b.Load(in);
  EXPECT_EQ(b.scale(), a.scale());
}

TEST(GradScalerTest, DisabledScalerIsATransparentPassThrough) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler s(o);
  EXPECT_TRUE(s.UnscaleAndUpdate(ParamsWithGrad(INFINITY), nullptr));
  EXPECT_EQ(s.Scale(torch::ones({1})).item<float>(), 1.0f);
}

}  // namespace
}  // namespace dtrun::worker
