// The host side of worker/device_step.h that runs without a GPU; the CUDA side is in
// tests/cuda/cuda_test.cc.
#include "worker/device_step.h"

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

TEST(LaggedReadbackTest, ValuesOnTheCpuAreReadAtOnceAndHandedOverInOrderWithTheirTags) {
  LaggedReadback r;
  r.Push(torch::tensor({1.5f, 2.0f}), 32);
  r.Push(torch::tensor({3.0, 4.0}, torch::kFloat64), 24);  // converted to float
  std::vector<LaggedReadback::Values> got = r.Take(/*all=*/false);
  ASSERT_EQ(got.size(), 2u) << "nothing to wait for on the CPU";
  EXPECT_EQ(got[0].values, (std::vector<float>{1.5f, 2.0f}));
  EXPECT_EQ(got[0].tag, 32);
  EXPECT_EQ(got[1].values, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(got[1].tag, 24);
  EXPECT_TRUE(r.Take(/*all=*/true).empty());
}

TEST(StepGraphTest, OnlyCudaBuildsOfLibTorch24OrNewerCapture) {
  EXPECT_EQ(StepGraph::Supported(), DTRUN_HAS_DEVICE_STEP == 1);
  if (!StepGraph::Supported()) {
    StepGraph g;
    EXPECT_THROW(g.Capture([] { return std::vector<torch::Tensor>{}; }), c10::Error);
  }
}

}  // namespace
}  // namespace dtrun::worker
