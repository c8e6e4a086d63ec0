// torch::optim::SGD with the update done by multi-tensor (_foreach) ops: a handful of kernel
// launches per parameter group instead of four per parameter (a ResNet-50 has 161 parameters),
// which is what PyTorch's Python SGD does on CUDA by default. Same options, same per-parameter
// state (momentum_buffer), so checkpoints are interchangeable with torch::optim::SGD's.
#pragma once

#include <torch/torch.h>

namespace dtrun::worker {

// `t` with the strides of `like` (same sizes): itself if they already match, a view where both are
// dense in the same memory order (a 1x1 convolution's weight and a gradient whose strides say
// channels-last), else a copy. Fused multi-tensor kernels want their tensor lists in one layout.
torch::Tensor InLayoutOf(const torch::Tensor& t, const torch::Tensor& like);

class ForeachSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // CUDA and LibTorch 2.4+ (DTRUN_HAS_DEVICE_STEP): one fused kernel per group reading the
  // learning rate from `lr` (float [1] on the device) and skipping the update where `found_inf`
  // (the loss scaler's flag, or undefined) is set: no host value in the step, so it can be
  // captured in a CUDA graph. The groups' lr options are not read. Same state as step().
  void StepOnDevice(const torch::Tensor& lr, const torch::Tensor& found_inf);
};

}  // namespace dtrun::worker
