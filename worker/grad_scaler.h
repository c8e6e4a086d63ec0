// Dynamic loss scaling for mixed precision (torch.cuda.amp.GradScaler's rules): multiply the loss
// by the scale (init 2^16); after backward, unscale the gradients and look for inf/NaN on every
// rank; on overflow skip the step and halve the scale, logging "Gradient overflow. Skipping step,
// loss scale reduced to X"; after 2000 clean steps double it. The state goes into checkpoints.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace dtrun::worker {

struct GradScalerOptions {
  bool enabled = true;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {}) : o_(options), scale_(options.init_scale) {}

  torch::Tensor Scale(const torch::Tensor& loss) const { return o_.enabled ? loss * scale_ : loss; }
  // Unscales gradients in place. `any_rank` turns a local overflow flag into the job's (e.g. an
  // all-reduce); returns true if the optimizer may step. Updates the scale either way.
  bool UnscaleAndUpdate(const std::vector<torch::Tensor>& params, const std::function<bool(bool)>& any_rank);

  double scale() const { return scale_; }
  int growth_tracker() const { return growth_tracker_; }
  // Sets both (a restored snapshot).
  void SetState(double scale, int growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }
  void Save(torch::serialize::OutputArchive& archive) const;
  void Load(torch::serialize::InputArchive& archive);

 private:
  GradScalerOptions o_;
  double scale_;
  int growth_tracker_ = 0;
};

}  // namespace dtrun::worker
