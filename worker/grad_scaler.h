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

  // The step on the GPU without host syncs (worker/device_step.h): the scale and the growth
  // tracker move into tensors on `device`, and the three calls below only queue kernels, with
  // torch.amp.GradScaler's rules. scale() and growth_tracker() then read the device (a sync, for
  // logs, snapshots and checkpoints). A disabled scaler stays on the host and does nothing.
  void KeepStateOn(const torch::Device& device);
  bool state_on_device() const { return scale_t_.defined(); }
  torch::Tensor ScaleOnDevice(const torch::Tensor& loss) const { return scale_t_.defined() ? loss * scale_t_ : loss; }
  // Unscales `grads` in place; returns the overflow flag (float [1] on the device: 1 if any
  // gradient holds an inf or NaN), or an undefined tensor when disabled.
  torch::Tensor UnscaleOnDevice(const std::vector<torch::Tensor>& grads);
  // After the optimizer step: backs off on overflow, grows after growth_interval clean steps.
  void UpdateOnDevice();
  // The scale as a float [1] tensor on the device (undefined unless state_on_device()).
  const torch::Tensor& scale_on_device() const { return scale_t_; }

  bool enabled() const { return o_.enabled; }
  double scale() const;
  int growth_tracker() const;
  // Sets both (a restored snapshot).
  void SetState(double scale, int growth_tracker);
  // Both as a float64 [2] {scale, growth tracker}, for snapshots: on the device while the state
  // is there (queued, no sync: the step stays free of host waits), else on the host.
  torch::Tensor StateTensor() const;
  // Sets both from a StateTensor() (a sync when it is on the device).
  void SetState(const torch::Tensor& state);
  void Save(torch::serialize::OutputArchive& archive) const;
  void Load(torch::serialize::InputArchive& archive);

 private:
  GradScalerOptions o_;
  double scale_;
  int growth_tracker_ = 0;
  torch::Tensor scale_t_, growth_t_, found_inf_;  // defined once the state is on the device
};

}  // namespace dtrun::worker
