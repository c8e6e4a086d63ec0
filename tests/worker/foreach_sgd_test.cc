#include "worker/foreach_sgd.h"

#include "gtest/gtest.h"

namespace dtrun::worker {
namespace {

// Runs `steps` updates with fixed gradients through `opt` and returns the parameters. The second
// parameter gets its first gradient only in the second step (its momentum buffer starts late).
template <class Optimizer>
std::vector<torch::Tensor> Train(const torch::optim::SGDOptions& o, int steps, bool two_groups) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params = {torch::randn({3, 4}, torch::requires_grad()),
                                       torch::randn({5}, torch::requires_grad())};
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (two_groups) {
    groups.emplace_back(std::vector<torch::Tensor>{params[0]}, std::make_unique<torch::optim::SGDOptions>(o));
    auto no_decay = o;
    no_decay.weight_decay(0);
    groups.emplace_back(std::vector<torch::Tensor>{params[1]}, std::make_unique<torch::optim::SGDOptions>(no_decay));
  } else {
    groups.emplace_back(params, std::make_unique<torch::optim::SGDOptions>(o));
  }
  Optimizer opt(groups, o);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (s == 0 && i == 1) continue;
      params[i].mutable_grad() = torch::full_like(params[i], 0.1 * (s + 1) * (i + 1)) + params[i].detach() * 0.01;
    }
    opt.step();
  }
  return params;
}

TEST(ForeachSgdTest, MatchesTorchSgdForEveryOptionMix) {
  for (bool nesterov : {false, true}) {
    for (double momentum : {0.0, 0.9}) {
      for (bool two_groups : {false, true}) {
        if (nesterov && momentum == 0) continue;
        auto o = torch::optim::SGDOptions(0.1).momentum(momentum).nesterov(nesterov).weight_decay(1e-2);
        auto ours = Train<ForeachSgd>(o, 4, two_groups);
        auto theirs = Train<torch::optim::SGD>(o, 4, two_groups);
        for (size_t i = 0; i < ours.size(); ++i) {
          EXPECT_TRUE(torch::allclose(ours[i], theirs[i], 1e-6, 1e-7))
              << "nesterov " << nesterov << " momentum " << momentum << " groups " << two_groups;
        }
      }
    }
  }
}

// Checkpoints stay interchangeable: the momentum buffers are SGD's own state.
TEST(ForeachSgdTest, StateRoundTripsThroughTorchSgdSerialization) {
  torch::Tensor p = torch::ones({4}, torch::requires_grad());
  ForeachSgd ours({p}, torch::optim::SGDOptions(0.1).momentum(0.9));
  p.mutable_grad() = torch::ones({4});
  ours.step();
  std::stringstream buf;
  {
    torch::serialize::OutputArchive out;
    ours.save(out);
    out.save_to(buf);
  }
  torch::Tensor q = p.detach().clone().requires_grad_(true);
  torch::optim::SGD theirs({q}, torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::serialize::InputArchive in;
  in.load_from(buf);
  theirs.load(in);
  p.mutable_grad() = torch::ones({4});
  q.mutable_grad() = torch::ones({4});
  ours.step();
  theirs.step();
  EXPECT_TRUE(torch::allclose(p, q));
}


// A 1x1 convolution's weight and a gradient with other strides share one memory order: a view,
// no copy. A 3x3 one's do not: a copy in the weight's layout.
TEST(InLayoutOfTest, AViewWhereTheMemoryOrderIsTheSameElseACopyInTheOtherLayout) {
  // As a 1x1 weight and the gradient cuDNN gives it: strides {4, 1, 1, 1} and {4, 1, 4, 4}.
  const torch::Tensor w1 = torch::randn({8, 4, 1, 1});
  const torch::Tensor g1 = torch::empty_strided({8, 4, 1, 1}, {4, 1, 4, 4}).normal_();
  ASSERT_NE(w1.strides(), g1.strides());
  const torch::Tensor v = InLayoutOf(g1, w1);
  EXPECT_EQ(v.strides(), w1.strides());
  EXPECT_EQ(v.data_ptr(), g1.data_ptr()) << "a view";
  EXPECT_TRUE(torch::equal(v, g1));

  const torch::Tensor w3 = torch::randn({8, 4, 3, 3}).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor g3 = torch::randn({8, 4, 3, 3});
  const torch::Tensor c = InLayoutOf(g3, w3);
  EXPECT_EQ(c.strides(), w3.strides());
  EXPECT_NE(c.data_ptr(), g3.data_ptr()) << "a copy";
  EXPECT_TRUE(torch::equal(c, g3));

  EXPECT_EQ(InLayoutOf(w3, w3).data_ptr(), w3.data_ptr()) << "already alike: itself";
}

}  // namespace
}  // namespace dtrun::worker
