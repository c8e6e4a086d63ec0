#include "worker/batch_norm_relu.h"

#include "gtest/gtest.h"
#include "worker/sync_batch_norm.h"

namespace dtrun::worker {
namespace {

namespace nn = torch::nn;

struct Result {
  torch::Tensor y, dx, dweight, dbias, dresidual, running_mean, running_var;
  int64_t batches = 0;
};

// Runs relu(bn(x) [+ residual]) forward and backward on a fresh copy of `bn` with `norm`.
template <typename Norm>
Result TrainStep(const nn::BatchNorm2d& prototype, torch::Tensor x, torch::Tensor residual, const torch::Tensor& dy,
           Norm norm) {
  nn::BatchNorm2d bn(prototype->options);
  {
    torch::NoGradGuard no_grad;
    bn->weight.copy_(prototype->weight);
    bn->bias.copy_(prototype->bias);
  }
  if (x.scalar_type() == torch::kFloat64) bn->to(torch::kFloat64);  // an exact reference
  x = x.detach().requires_grad_();
  if (residual.defined()) residual = residual.detach().requires_grad_();
  torch::Tensor y = norm(bn, x, residual);
  y.backward(dy);
  return {y.detach(), x.grad(), bn->weight.grad(), bn->bias.grad(),
          residual.defined() ? residual.grad() : torch::Tensor(), bn->running_mean.clone(), bn->running_var.clone(),
          bn->num_batches_tracked.item<int64_t>()};
}

torch::Tensor Unfused(nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  torch::Tensor y = bn->forward(x);
  if (residual.defined()) y = y + residual;
  return torch::relu(y);
}

torch::Tensor Fused(nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  EXPECT_TRUE(UsesFusedBatchNormRelu(bn, x, residual));
  return BatchNormAddRelu(bn, x, residual);
}

void ExpectClose(const torch::Tensor& a, const torch::Tensor& b, double tolerance, const char* what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  const double scale = std::max(1.0, b.to(torch::kFloat64).abs().max().item<double>());
  const double err = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
  EXPECT_LE(err, tolerance * scale) << what << ": max error " << err << " (scale " << scale << ")";
}

void ExpectSame(const Result& got, const Result& want, double tolerance) {
  ExpectClose(got.y, want.y, tolerance, "output");
  ExpectClose(got.dx, want.dx, tolerance, "input gradient");
  ExpectClose(got.dweight, want.dweight, tolerance, "weight gradient");
  ExpectClose(got.dbias, want.dbias, tolerance, "bias gradient");
  ExpectClose(got.dresidual, want.dresidual, tolerance, "residual gradient");
  ExpectClose(got.running_mean, want.running_mean, tolerance, "running mean");
  ExpectClose(got.running_var, want.running_var, tolerance, "running variance");
  EXPECT_EQ(got.batches, want.batches);
}

nn::BatchNorm2d Prototype(int64_t channels) {
  nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.3, 0.3);
  return bn;
}

torch::Tensor ChannelsLast(torch::Tensor t) { return t.contiguous(torch::MemoryFormat::ChannelsLast); }

TEST(BatchNormReluTest, FusedMatchesBatchNormAddReluInFloat32) {
  torch::manual_seed(1);
  nn::BatchNorm2d bn = Prototype(24);
  torch::Tensor x = ChannelsLast(torch::randn({5, 24, 7, 9}) * 3 + 1);
  torch::Tensor residual = ChannelsLast(torch::randn({5, 24, 7, 9}));
  torch::Tensor dy = torch::randn({5, 24, 7, 9});
  for (bool with_residual : {false, true}) {
    SCOPED_TRACE(with_residual ? "with residual" : "without residual");
    torch::Tensor r = with_residual ? residual : torch::Tensor();
    ExpectSame(TrainStep(bn, x, r, dy, Fused), TrainStep(bn, x, r, dy, Unfused), 1e-5);
  }
}

TEST(BatchNormReluTest, FusedMatchesInBFloat16WithinItsPrecision) {
  torch::manual_seed(2);
  nn::BatchNorm2d bn = Prototype(32);
  torch::Tensor x = ChannelsLast(torch::randn({4, 32, 6, 6}).to(torch::kBFloat16));
  torch::Tensor residual = ChannelsLast(torch::randn({4, 32, 6, 6}).to(torch::kBFloat16));
  torch::Tensor dy = torch::randn({4, 32, 6, 6}).to(torch::kBFloat16);
  Result fused = TrainStep(bn, x, residual, dy, Fused);
  EXPECT_EQ(fused.y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(fused.dx.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(fused.dweight.scalar_type(), torch::kFloat32);  // parameters stay float32
  // The reference computes in float32 from the same bfloat16 values.
  Result reference = TrainStep(bn, x.to(torch::kFloat32), residual.to(torch::kFloat32), dy.to(torch::kFloat32), Unfused);
  ExpectSame(fused, reference, 2e-2);
}

TEST(BatchNormReluTest, StatisticsKeepPrecisionWhenTheMeanDwarfsTheSpread) {
  torch::manual_seed(3);
  nn::BatchNorm2d bn = Prototype(16);
  torch::Tensor x = ChannelsLast(torch::randn({8, 16, 32, 32}) * 0.01 + 1000);
  torch::Tensor dy = torch::randn({8, 16, 32, 32});
  Result fused = TrainStep(bn, x, {}, dy, Fused);
  Result exact = TrainStep(bn, x.to(torch::kFloat64), {}, dy.to(torch::kFloat64), Unfused);
  // Terms taken of x·scale (~1e5 here) lost the output's low digits in float32 (1e-2 off), and
  // Σg·x − mean·Σg lost the input gradient entirely (400 off at 540); x − mean is exact.
  ExpectClose(fused.y, exact.y, 1e-5, "output");
  ExpectClose(fused.dx, exact.dx, 1e-5, "input gradient");
  ExpectClose(fused.dweight, exact.dweight, 1e-5, "weight gradient");
  ExpectClose(fused.dbias, exact.dbias, 1e-5, "bias gradient");
  ExpectClose(fused.running_var, exact.running_var, 1e-6, "running variance");
}

TEST(BatchNormReluTest, ThreadsGiveTheSameResult) {
  torch::manual_seed(4);
  nn::BatchNorm2d bn = Prototype(64);
  torch::Tensor x = ChannelsLast(torch::randn({16, 64, 14, 14}));
  torch::Tensor dy = torch::randn({16, 64, 14, 14});
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  Result one = TrainStep(bn, x, x.flip(0), dy, Fused);
  torch::set_num_threads(2);
  Result two = TrainStep(bn, x, x.flip(0), dy, Fused);
  torch::set_num_threads(threads);
  ExpectSame(two, one, 1e-5);
}

TEST(BatchNormReluTest, OtherLayoutsAndEvalModeUseTheUnfusedOperations) {
  torch::manual_seed(5);
  nn::BatchNorm2d bn = Prototype(8);
  torch::Tensor nchw = torch::randn({2, 8, 5, 5});
  EXPECT_FALSE(UsesFusedBatchNormRelu(bn, nchw, {}));
  EXPECT_FALSE(UsesFusedBatchNormRelu(bn, ChannelsLast(nchw), nchw));  // residual in another layout
  EXPECT_FALSE(UsesFusedBatchNormRelu(bn, ChannelsLast(nchw), {}, NormalizationMode{nullptr, /*fused=*/false}));
  torch::Tensor dy = torch::randn({2, 8, 5, 5});
  auto via_dispatch = [](nn::BatchNorm2d& b, const torch::Tensor& x, const torch::Tensor& r) {
    return BatchNormAddRelu(b, x, r);
  };
  ExpectSame(TrainStep(bn, nchw, nchw.flip(0), dy, via_dispatch), TrainStep(bn, nchw, nchw.flip(0), dy, Unfused), 0);
  bn->eval();
  EXPECT_FALSE(UsesFusedBatchNormRelu(bn, ChannelsLast(nchw), {}));
  torch::NoGradGuard no_grad;
  ExpectClose(BatchNormAddRelu(bn, ChannelsLast(nchw), {}), torch::relu(bn->forward(nchw)), 0, "eval output");
}

// A stand-in for N identical ranks: every sum comes back multiplied by N.
class IdenticalRanks : public BatchNormSync {
 public:
  explicit IdenticalRanks(int ranks) : BatchNormSync(ProcessGroupHandle{}), ranks_(ranks) {}
  void SumAcrossRanks(torch::Tensor& t) override {
    ++calls;
    t = t * ranks_;
  }
  int calls = 0;

 private:
  int ranks_;
};

TEST(SyncBatchNormTest, IdenticalRanksGiveThePerProcessResult) {
  torch::manual_seed(6);
  nn::BatchNorm2d bn = Prototype(12);
  torch::Tensor x = torch::randn({4, 12, 6, 6}) * 2 - 1;
  torch::Tensor dy = torch::randn({4, 12, 6, 6});
  auto ranks = std::make_shared<IdenticalRanks>(3);
  auto synced = [&](nn::BatchNorm2d& b, const torch::Tensor& in, const torch::Tensor& r) {
    return BatchNormAddRelu(b, in, r, NormalizationMode{ranks});
  };
  Result got = TrainStep(bn, x, {}, dy, synced);
  Result want = TrainStep(bn, x, {}, dy, Unfused);
  EXPECT_EQ(ranks->calls, 2);  // statistics in forward, gradient sums in backward
  // Three identical ranks: the same normalisation and input gradient; parameter gradients are
  // this rank's (DDP averages them). Only the running variance's n/(n-1) sees 3× the samples.
  ExpectClose(got.y, want.y, 1e-5, "output");
  ExpectClose(got.dx, want.dx, 1e-5, "input gradient");
  ExpectClose(got.dweight, want.dweight, 1e-5, "weight gradient");
  ExpectClose(got.dbias, want.dbias, 1e-5, "bias gradient");
  ExpectClose(got.running_mean, want.running_mean, 1e-6, "running mean");
  const double n = 4 * 6 * 6;
  ExpectClose(got.running_var, (want.running_var - 0.9) * (3 * n / (3 * n - 1)) / (n / (n - 1)) + 0.9, 1e-5,
              "running variance");
  EXPECT_EQ(got.batches, 1);
}

}  // namespace
}  // namespace dtrun::worker
