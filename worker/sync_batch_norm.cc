#include "worker/sync_batch_norm.h"

#include <cstdint>

#include <torch/csrc/autograd/custom_function.h>

namespace dtrun::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const std::vector<int64_t> kReduceDims = {0, 2, 3};  // all but the channel dimension

// Per-channel view [1, C, 1, 1] for broadcasting against NCHW.
torch::Tensor PerChannel(const torch::Tensor& t) { return t.view({1, -1, 1, 1}); }

// The autograd node. Statistics are combined in float64, so E[x²] − E[x]² does not cancel.
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor running_mean, torch::Tensor running_var, double momentum, double eps,
                               BatchNormSync* sync) {
    const int64_t channels = x.size(1);
    torch::Tensor xf = x.to(torch::kFloat32);
    auto [var, mean] = torch::var_mean(xf, kReduceDims, /*unbiased=*/false);
    const double count = static_cast<double>(x.numel() / channels);
    // [count·mean, count·E[x²], count] summed over ranks.
    torch::Tensor meand = mean.to(torch::kFloat64), vard = var.to(torch::kFloat64);
    torch::Tensor stats = torch::cat({meand * count, (vard + meand * meand) * count,
                                      torch::full({1}, count, meand.options())});
    sync->SumAcrossRanks(stats);
    // The global count stays on the device: reading it would make the host wait for the GPU in
    // every batch norm layer of every step.
    torch::Tensor total = stats.narrow(0, 2 * channels, 1);
    torch::Tensor global_mean = stats.narrow(0, 0, channels) / total;
    torch::Tensor global_var = (stats.narrow(0, channels, channels) / total - global_mean * global_mean).clamp_min(0);
    running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype()), momentum);  // forward runs without grad
    torch::Tensor unbias = torch::where(total > 1, total / (total - 1), torch::ones_like(total));
    running_var.mul_(1 - momentum).add_((global_var * unbias).to(running_var.dtype()), momentum);
    torch::Tensor mean_f = global_mean.to(torch::kFloat32);
    torch::Tensor invstd = (global_var + eps).rsqrt().to(torch::kFloat32);
    torch::Tensor xhat = (xf - PerChannel(mean_f)) * PerChannel(invstd);
    ctx->save_for_backward({xhat, invstd, weight, total});
    ctx->saved_data["sync"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(sync));  // outlives the step
    return (xhat * PerChannel(weight) + PerChannel(bias)).to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& xhat = saved[0];
    const torch::Tensor& invstd = saved[1];
    const torch::Tensor& weight = saved[2];
    const torch::Tensor& total = saved[3];
    auto* sync = reinterpret_cast<BatchNormSync*>(static_cast<intptr_t>(ctx->saved_data["sync"].toInt()));
    const int64_t channels = xhat.size(1);
    torch::Tensor dy = grads[0].to(torch::kFloat32);
    torch::Tensor sum_dy = dy.sum(kReduceDims);
    torch::Tensor sum_dy_xhat = (dy * xhat).sum(kReduceDims);
    // Parameter gradients from this rank's samples (DDP averages them); the input gradient needs
    // the sums over the global batch.
    torch::Tensor grad_weight = sum_dy_xhat.to(weight.scalar_type());
    torch::Tensor grad_bias = sum_dy.to(weight.scalar_type());
    torch::Tensor sums = torch::cat({sum_dy, sum_dy_xhat}).to(torch::kFloat64);
    sync->SumAcrossRanks(sums);
    torch::Tensor mean_dy = (sums.narrow(0, 0, channels) / total).to(torch::kFloat32);
    torch::Tensor mean_dy_xhat = (sums.narrow(0, channels, channels) / total).to(torch::kFloat32);
    torch::Tensor dx = (dy - PerChannel(mean_dy) - xhat * PerChannel(mean_dy_xhat)) * PerChannel(invstd * weight);
    return {dx.to(grads[0].scalar_type()), grad_weight, grad_bias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

void BatchNormSync::SumAcrossRanks(torch::Tensor& t) {
  CollectiveWatchdog::Scope guard(watchdog_, "a SyncBatchNorm all-reduce");
  std::vector<torch::Tensor> tensors{t.contiguous()};
  pg_.backend->allreduce(tensors)->wait();
  t = tensors[0];
}

torch::Tensor SyncBatchNorm(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, BatchNormSync* sync) {
  if (sync == nullptr || !bn->is_training()) return bn->forward(x);
  {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked.add_(1);
  }
  // No momentum: a cumulative average, as BatchNorm2d does.
  const double momentum = bn->options.momentum().has_value()
                              ? *bn->options.momentum()
                              : 1.0 / static_cast<double>(bn->num_batches_tracked.item<int64_t>());
  return SyncBatchNormFunction::apply(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, momentum,
                                      bn->options.eps(), sync);
}

}  // namespace dtrun::worker
