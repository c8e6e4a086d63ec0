#include "worker/grad_scaler.h"

#include <cstdio>

namespace dtrun::worker {
namespace {

// Multiplies every gradient by `inv_scale`; true if any is inf/NaN. One fused multi-tensor kernel
// per device and one host sync in all (as torch.amp.GradScaler), not a sync per parameter.
bool UnscaleAndCheck(const std::vector<torch::Tensor>& params, double inv_scale) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return false;
  const torch::Device device = grads.front().device();
  torch::Tensor found_inf = torch::zeros({1}, torch::TensorOptions().device(device).dtype(torch::kFloat32));
  if (device.is_cuda()) {
    torch::Tensor inv = torch::full({1}, inv_scale, torch::TensorOptions().device(device).dtype(torch::kFloat32));
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  } else {
    for (torch::Tensor& g : grads) {
      g.mul_(inv_scale);
      found_inf.add_(torch::isfinite(g).logical_not().any());
    }
  }
  return found_inf.item<float>() > 0;
}

}  // namespace

bool GradScaler::UnscaleAndUpdate(const std::vector<torch::Tensor>& params, const std::function<bool(bool)>& any_rank) {
  if (!o_.enabled) return true;
  torch::NoGradGuard no_grad;
  const bool local_overflow = UnscaleAndCheck(params, 1.0 / scale_);
  const bool overflow = any_rank ? any_rank(local_overflow) : local_overflow;
  if (overflow) {
    scale_ *= o_.backoff_factor;
    growth_tracker_ = 0;
    std::printf("Gradient overflow. Skipping step, loss scale reduced to %g\n", scale_);
    std::fflush(stdout);
    return false;
  }
  if (++growth_tracker_ >= o_.growth_interval) {
    scale_ *= o_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

void GradScaler::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", torch::tensor(scale_, torch::kFloat64));
  archive.write("growth_tracker", torch::tensor(static_cast<int64_t>(growth_tracker_)));
}

void GradScaler::Load(torch::serialize::InputArchive& archive) {
  torch::Tensor t;
  archive.read("scale", t);
  scale_ = t.item<double>();
  archive.read("growth_tracker", t);
  growth_tracker_ = static_cast<int>(t.item<int64_t>());
}

}  // namespace dtrun::worker
