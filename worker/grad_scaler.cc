#include "worker/grad_scaler.h"

#include <cstdio>

namespace dtrun::worker {

bool GradScaler::UnscaleAndUpdate(const std::vector<torch::Tensor>& params, const std::function<bool(bool)>& any_rank) {
  if (!o_.enabled) return true;
  torch::NoGradGuard no_grad;
  bool local_overflow = false;
  const double inv = 1.0 / scale_;
  for (const torch::Tensor& p : params) {
    torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inv);
    if (!local_overflow && !torch::isfinite(g).all().item<bool>()) local_overflow = true;
  }
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
