// torch::optim::SGD with the update done by multi-tensor (_foreach) ops: a handful of kernel
// launches per parameter group instead of four per parameter (a ResNet-50 has 161 parameters),
// which is what PyTorch's Python SGD does on CUDA by default. Same options, same per-parameter
// state (momentum_buffer), so checkpoints are interchangeable with torch::optim::SGD's.
#pragma once

#include <torch/torch.h>

namespace dtrun::worker {

class ForeachSgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace dtrun::worker
