#include "worker/batch_norm_relu.h"

#include "worker/cudnn_batch_norm_relu.h"

#include <torch/csrc/autograd/custom_function.h>

#include "worker/batch_norm_kernels.h"
#include "worker/sync_batch_norm.h"

namespace dtrun::worker {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

kernels::Element ElementOf(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat32 ? kernels::Element::kFloat32 : kernels::Element::kBFloat16;
}

// Channels-last NCHW as a rows × channels matrix.
int64_t Rows(const torch::Tensor& x) { return x.numel() / x.size(1); }

torch::Tensor ChannelsLastLike(const torch::Tensor& x) {
  return torch::empty_like(x, x.options(), torch::MemoryFormat::ChannelsLast);
}

torch::Tensor Float64(std::vector<double> v) { return torch::tensor(v, torch::kFloat64); }

// Forward and backward shared by the two autograd functions below; `residual` may be undefined.
// Running statistics are updated in place.
struct FusedBatchNormRelu {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& residual, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps) {
    const int64_t channels = x.size(1), rows = Rows(x);
    std::vector<double> mean(channels), var(channels);
    kernels::ChannelMeanVar(x.data_ptr(), ElementOf(x), rows, channels, mean.data(), var.data());
    torch::Tensor mean_t = Float64(mean), var_t = Float64(var);
    // The kernels take x − center, exact in float32 however far the mean is from zero.
    torch::Tensor center = mean_t.to(torch::kFloat32).contiguous();
    torch::Tensor invstd = (var_t + eps).rsqrt();
    torch::Tensor scale = (weight.to(torch::kFloat64) * invstd);
    torch::Tensor shift = bias.to(torch::kFloat64) - (mean_t - center.to(torch::kFloat64)) * scale;
    torch::Tensor scale_f = scale.to(torch::kFloat32).contiguous(), shift_f = shift.to(torch::kFloat32).contiguous();
    torch::Tensor y = ChannelsLastLike(x);
    kernels::ScaleShiftRelu(x.data_ptr(), residual.defined() ? residual.data_ptr() : nullptr, y.data_ptr(),
                            ElementOf(x), rows, channels, center.data_ptr<float>(), scale_f.data_ptr<float>(),
                            shift_f.data_ptr<float>());
    running_mean.mul_(1 - momentum).add_(mean_t.to(running_mean.dtype()), momentum);
    const double unbias = rows > 1 ? static_cast<double>(rows) / (rows - 1) : 1.0;
    running_var.mul_(1 - momentum).add_((var_t * unbias).to(running_var.dtype()), momentum);
    ctx->save_for_backward({x, y, weight, mean_t, invstd});
    ctx->saved_data["has_residual"] = residual.defined();
    return y;
  }

  // Returns {dx, d_weight, d_bias, d_residual}.
  static variable_list backward(AutogradContext* ctx, const variable_list& grads) {
    variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &invstd = saved[4];
    const torch::Tensor center = mean.to(torch::kFloat32).contiguous();  // as the forward took it
    const bool has_residual = ctx->saved_data["has_residual"].toBool();
    // The fused kernels read dy as the activations' layout and type.
    torch::Tensor dy = grads[0].to(x.scalar_type()).contiguous(torch::MemoryFormat::ChannelsLast);
    const int64_t channels = x.size(1), rows = Rows(x);
    torch::Tensor d_residual = has_residual ? ChannelsLastLike(x) : torch::Tensor();
    std::vector<double> sum_g(channels), sum_gx(channels);  // Σg and Σg·(x − center)
    kernels::MaskedGradSums(dy.data_ptr(), y.data_ptr(), x.data_ptr(),
                            has_residual ? d_residual.data_ptr() : nullptr, ElementOf(x), rows, channels,
                            center.data_ptr<float>(), sum_g.data(), sum_gx.data());
    torch::Tensor sum_g_t = Float64(sum_g);
    torch::Tensor off = mean - center.to(torch::kFloat64);  // the mean, seen from the center
    torch::Tensor sum_gxhat = invstd * (Float64(sum_gx) - off * sum_g_t);  // Σ g·x̂
    // dx = w·invstd·(g − Σg/M − x̂·Σg·x̂/M), written as a·g + b·(x − center) + c per channel.
    torch::Tensor a = weight.to(torch::kFloat64) * invstd;
    torch::Tensor b = -a * invstd * sum_gxhat / rows;
    torch::Tensor c = -a * sum_g_t / rows - b * off;
    torch::Tensor a_f = a.to(torch::kFloat32), b_f = b.to(torch::kFloat32), c_f = c.to(torch::kFloat32);
    torch::Tensor dx = ChannelsLastLike(x);
    kernels::AffineMaskedGrad(dy.data_ptr(), y.data_ptr(), x.data_ptr(), dx.data_ptr(), ElementOf(x), rows, channels,
                              center.data_ptr<float>(), a_f.data_ptr<float>(), b_f.data_ptr<float>(),
                              c_f.data_ptr<float>());
    return {dx, sum_gxhat.to(weight.scalar_type()), sum_g_t.to(weight.scalar_type()), d_residual};
  }
};

// Autograd takes no undefined tensor inputs, hence one function with a residual and one without.
struct BatchNormReluFunction : public torch::autograd::Function<BatchNormReluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor running_mean, torch::Tensor running_var, double momentum, double eps) {
    return FusedBatchNormRelu::forward(ctx, x, weight, bias, {}, running_mean, running_var, momentum, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = FusedBatchNormRelu::backward(ctx, grads);
    return {g[0], g[1], g[2], {}, {}, {}, {}};
  }
};

struct BatchNormAddReluFunction : public torch::autograd::Function<BatchNormAddReluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor residual, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps) {
    return FusedBatchNormRelu::forward(ctx, x, weight, bias, residual, running_mean, running_var, momentum, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list g = FusedBatchNormRelu::backward(ctx, grads);
    return {g[0], g[1], g[2], g[3], {}, {}, {}, {}};
  }
};

bool IsChannelsLastOf(const torch::Tensor& t, at::ScalarType type) {
  return t.device().is_cpu() && t.dim() == 4 && t.scalar_type() == type &&
         t.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

bool UsesFusedBatchNormRelu(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual,
                            const NormalizationMode& mode) {
  const auto type = x.scalar_type();
  return mode.fused && mode.sync == nullptr && bn->is_training() && bn->options.affine() && bn->options.track_running_stats() &&
         bn->options.momentum().has_value() &&
         (type == torch::kFloat32 || type == torch::kBFloat16) && IsChannelsLastOf(x, type) && x.numel() > 0 &&
         bn->weight.scalar_type() == torch::kFloat32 &&
         (!residual.defined() || (IsChannelsLastOf(residual, type) && residual.sizes() == x.sizes()));
}

torch::Tensor BatchNormAddRelu(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual,
                               const NormalizationMode& mode) {
  if (mode.cudnn && mode.sync == nullptr && CudnnBatchNormReluApplies(bn, x, residual)) {
    return CudnnBatchNormAddRelu(bn, x, residual);
  }
  if (!UsesFusedBatchNormRelu(bn, x, residual, mode)) {
    torch::Tensor y = SyncBatchNorm(bn, x, mode.sync.get());
    if (residual.defined()) y = y.add_(residual);
    return y.relu_();
  }
  {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked.add_(1);
  }
  const double momentum = *bn->options.momentum(), eps = bn->options.eps();
  if (!residual.defined()) {
    return BatchNormReluFunction::apply(x, bn->weight, bn->bias, bn->running_mean, bn->running_var, momentum, eps);
  }
  return BatchNormAddReluFunction::apply(x, bn->weight, bn->bias, residual, bn->running_mean, bn->running_var,
                                         momentum, eps);
}

}  // namespace dtrun::worker
