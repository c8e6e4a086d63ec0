// The host side of worker/device_step.h that runs without a GPU; the CUDA side is in
// tests/cuda/cuda_test.cc.
#include "worker/device_step.h"

#include <string>
#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

TEST(LaggedReadbackTest, ValuesOnTheCpuAreReadAtOnceAndHandedOverInOrderWithTheirTags) {
  LaggedReadback r;
  r.Push(torch::tensor({1.5f, 2.0f}), 32);
  r.Push(torch::tensor({3.0, 4.0}, torch::kFloat64), 24);
  r.Push(torch::tensor({0x1.fffffffffffffp+49}, torch::kFloat64), 8);  // every bit of a double
  std::vector<LaggedReadback::Values> got = r.Take(/*all=*/false);
  ASSERT_EQ(got.size(), 3u) << "nothing to wait for on the CPU";
  EXPECT_EQ(got[0].values, (std::vector<double>{1.5, 2.0}));
  EXPECT_EQ(got[0].tag, 32);
  EXPECT_EQ(got[1].values, (std::vector<double>{3.0, 4.0}));
  EXPECT_EQ(got[1].tag, 24);
  EXPECT_EQ(got[2].values, (std::vector<double>{0x1.fffffffffffffp+49}));
  EXPECT_TRUE(r.Take(/*all=*/true).empty());
}

TEST(StepGraphTest, OnlyCudaBuildsOfLibTorch24OrNewerCapture) {
  EXPECT_EQ(StepGraph::Supported(), DTRUN_HAS_DEVICE_STEP == 1);
  if (!StepGraph::Supported()) {
    StepGraph g;
    EXPECT_THROW(g.Capture([] { return std::vector<torch::Tensor>{}; }), c10::Error);
  }
}

// On the CPU (or with graphs off) every step runs eagerly, each with fresh gradients: a step's
// gradients are its own, not a sum with the step before.
TEST(GraphedStepTest, EagerStepsRunTheBodyOnTheInputsWithFreshGradients) {
  torch::manual_seed(1);
  torch::nn::Linear net(12, 2);
  std::vector<std::string> lines;
  int calls = 0;
  GraphedStep step(
      *net, torch::kCPU, /*graphs=*/true,
      [&](const torch::Tensor& pixels, const torch::Tensor& labels) {
        ++calls;
        for (const torch::Tensor& p : net->parameters()) EXPECT_FALSE(p.grad().defined());
        torch::Tensor loss = torch::nn::functional::cross_entropy(
            net->forward(pixels.reshape({pixels.size(0), -1}).to(torch::kFloat32)), labels);
        loss.backward();
        return loss.detach().reshape({1});
      },
      [&](const std::string& line) { lines.push_back(line); });
  const torch::Tensor pixels = torch::randint(0, 256, {4, 2, 2, 3}, torch::kUInt8);
  const torch::Tensor labels = torch::tensor({0, 1, 1, 0}, torch::kInt64);
  torch::Tensor first_grad;
  for (int i = 0; i < 6; ++i) {
    const torch::Tensor values = step.Run(pixels, labels, /*full_batch=*/4);
    EXPECT_EQ(values.numel(), 1);
    if (i == 0) first_grad = net->weight.grad().clone();
    EXPECT_TRUE(net->weight.grad().equal(first_grad)) << "step " << i;
    net->weight.grad().add_(1);  // as an optimizer leaves things: the next step must not see it
  }
  step.Run(pixels.narrow(0, 0, 3), labels.narrow(0, 0, 3), 4);  // a partial batch
  EXPECT_EQ(calls, 7);
  EXPECT_TRUE(lines.empty());  // graphs are for a GPU: on the CPU nothing is captured, nothing said
}

}  // namespace
}  // namespace dtrun::worker
