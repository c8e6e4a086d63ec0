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

void GradScaler::KeepStateOn(const torch::Device& device) {
  if (!o_.enabled) return;
  const auto on = torch::TensorOptions().device(device);
  scale_t_ = torch::full({1}, scale_, on.dtype(torch::kFloat32));
  growth_t_ = torch::full({1}, growth_tracker_, on.dtype(torch::kInt32));
  found_inf_ = torch::zeros({1}, on.dtype(torch::kFloat32));
}

torch::Tensor GradScaler::UnscaleOnDevice(const std::vector<torch::Tensor>& grads) {
  if (!scale_t_.defined()) return {};
  torch::NoGradGuard no_grad;
  found_inf_.zero_();
  if (!grads.empty()) at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, scale_t_.reciprocal());
  return found_inf_;
}

void GradScaler::UpdateOnDevice() {
  if (!scale_t_.defined()) return;
  torch::NoGradGuard no_grad;
  at::_amp_update_scale_(scale_t_, growth_t_, found_inf_, o_.growth_factor, o_.backoff_factor, o_.growth_interval);
}

double GradScaler::scale() const { return scale_t_.defined() ? scale_t_.item<double>() : scale_; }

int GradScaler::growth_tracker() const { return growth_t_.defined() ? growth_t_.item<int>() : growth_tracker_; }

torch::Tensor GradScaler::StateTensor() const {
  if (!scale_t_.defined()) return torch::tensor({scale_, static_cast<double>(growth_tracker_)}, torch::kFloat64);
  torch::NoGradGuard no_grad;
  return torch::cat({scale_t_.reshape(1).to(torch::kFloat64), growth_t_.reshape(1).to(torch::kFloat64)});
}

void GradScaler::SetState(const torch::Tensor& state) {
  const torch::Tensor s = state.to(torch::kCPU);
  SetState(s[0].item<double>(), static_cast<int>(s[1].item<double>()));
}

void GradScaler::SetState(double scale, int growth_tracker) {
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  if (scale_t_.defined()) {
    scale_t_.fill_(scale);
    growth_t_.fill_(growth_tracker);
  }
}

void GradScaler::Save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", torch::tensor(scale(), torch::kFloat64));
  archive.write("growth_tracker", torch::tensor(static_cast<int64_t>(growth_tracker())));
}

void GradScaler::Load(torch::serialize::InputArchive& archive) {
  torch::Tensor t;
  archive.read("scale", t);
  const double scale = t.item<double>();
  archive.read("growth_tracker", t);
  SetState(scale, static_cast<int>(t.item<int64_t>()));
}

}  // namespace dtrun::worker
