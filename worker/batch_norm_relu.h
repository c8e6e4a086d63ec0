// relu(bn(x) [+ residual]) — the normalisation step of every ResNet block — as one operation.
// On CPU, for channels-last float or bfloat16 activations in training, it runs fused kernels
// (worker/batch_norm_kernels.h): about a third of the memory passes of ATen's BatchNorm, add and
// ReLU, which are memory-bound and took ~20% of a ResNet-18 CPU step. Elsewhere (CUDA, NCHW,
// eval, SyncBatchNorm) it is exactly the unfused composition. Updates the module's running
// statistics and batch counter as BatchNorm2d::forward does.
#pragma once

#include <torch/torch.h>

namespace dtrun::worker {

class BatchNormSync;  // worker/sync_batch_norm.h

// How a model normalises; shared by the model and its blocks, so it can change after building.
struct NormalizationMode {
  std::shared_ptr<BatchNormSync> sync;  // SyncBatchNorm; null: statistics per process
  bool fused = true;                    // the fused CPU kernels where they apply
  bool cudnn = false;                   // cuDNN's fused call on a GPU where it applies (worker/cudnn_batch_norm_relu.h)
};

// `residual` may be an undefined tensor (no residual add).
torch::Tensor BatchNormAddRelu(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual,
                               const NormalizationMode& mode = {});

// True if BatchNormAddRelu takes the fused CPU path for these arguments (for tests).
bool UsesFusedBatchNormRelu(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual,
                            const NormalizationMode& mode = {});

}  // namespace dtrun::worker
