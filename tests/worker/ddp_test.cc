// DDP's bucket all-reduces (worker/ddp.h) launched during backward: in the same order on every
// rank even where backward makes the gradients in a different order on each, as NCCL needs (it
// pairs collectives by the order they are called, Gloo by a counter, neither by name). Two ranks
// in two threads (tests/worker/gloo_ranks.h).
#include "worker/ddp.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/worker/gloo_ranks.h"

namespace dtrun::worker {
namespace {

#if DTRUN_WITH_GLOO

constexpr int kDdpRanks = 2;

// Two layers of one shape, so that a bucket of one paired with the other's on another rank
// would be summed without an error: only the values would be wrong.
struct TwinsImpl : torch::nn::Module {
  TwinsImpl() : a(register_module("a", torch::nn::Linear(16, 16))), b(register_module("b", torch::nn::Linear(16, 16))) {
    torch::NoGradGuard no_grad;  // every rank alike (the global seed is shared by the threads)
    for (torch::Tensor& p : parameters()) p.copy_(torch::linspace(-1, 1, p.numel()).reshape(p.sizes()));
    b->weight.mul_(-0.5);
  }
  // Backward runs the nodes made last first: rank 0 gets b's gradients first, rank 1 a's.
  torch::Tensor forward(const torch::Tensor& x, int rank) {
    if (rank == 0) {
      torch::Tensor ya = a(x);
      return ya + b(x * 2);
    }
    torch::Tensor yb = b(x * 2);
    return a(x) + yb;
  }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Twins);

torch::Tensor Input(int rank) { return torch::linspace(-1, 1, 4 * 16).reshape({4, 16}) * (rank + 1); }

// Each parameter's gradient averaged over the ranks' inputs, computed without communication.
std::vector<torch::Tensor> AveragedGradients() {
  std::vector<torch::Tensor> sum;
  for (int rank = 0; rank < kDdpRanks; ++rank) {
    Twins net;
    net->forward(Input(rank), rank).square().sum().backward();
    std::vector<torch::Tensor> params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (sum.size() <= i) sum.push_back(torch::zeros_like(params[i]));
      sum[i] += params[i].grad() / kDdpRanks;
    }
  }
  return sum;
}

TEST(DdpTest, BucketsLaunchedDuringBackwardAreAllReducedInOneOrderWhateverOrderTheGradientsCameIn) {
  const std::vector<torch::Tensor> expected = AveragedGradients();
  std::vector<std::vector<torch::Tensor>> got(kDdpRanks);
  const std::vector<std::string> errors = testing::OnEveryRank(kDdpRanks, [&](int rank, ProcessGroupHandle& pg) {
    Twins net;
    DdpOptions o;
    o.bucket_mb = 1e-9;  // a bucket per parameter
    o.overlap = true;
    DistributedDataParallel ddp(net.ptr(), pg, kDdpRanks, o);
    for (int step = 0; step < 3; ++step) {  // the order holds step after step
      for (torch::Tensor& p : net->parameters()) p.mutable_grad() = torch::Tensor();
      net->forward(Input(rank), rank).square().sum().backward();
      ddp.FinishGradientSync();
    }
    for (const torch::Tensor& p : net->parameters()) got[rank].push_back(p.grad().clone());
  });
  for (int r = 0; r < kDdpRanks; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(got[r][i], expected[i], 1e-5, 1e-6))
          << "rank " << r << ", parameter " << i << ": off by " << (got[r][i] - expected[i]).abs().max().item<float>();
    }
  }
}

#else
TEST(DdpTest, TheOrderTestNeedsGloo) {
  GTEST_SKIP() << "this LibTorch has no Gloo headers (pip's wheels): the two ranks run on CPU Gloo groups";
}
#endif

}  // namespace
}  // namespace dtrun::worker
