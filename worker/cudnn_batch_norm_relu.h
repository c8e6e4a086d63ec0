// relu(bn(x) [+ residual]) on a GPU as one cuDNN call each way: batch norm's "Ex" API with
// CUDNN_BATCHNORM_OPS_BN_ACTIVATION or _BN_ADD_ACTIVATION, for channels-last half-precision
// activations in training. The ReLU, its gradient and the residual add then stop being passes of
// their own over the activations: in a ResNet-50 step on an H200 they took ~8 of 42 ms
// (docs/BENCHMARKS.md, "On a GPU: one H200"). Off unless asked for (--cudnn-bn-relu) until a GPU
// session has checked and measured it. The only cuDNN code of the worker library; without
// cuDNN's header and library at build time, Built() is false and nothing else may be called.
#pragma once

#include <torch/torch.h>

namespace dtrun::worker {

bool CudnnBatchNormReluBuilt();
// Whether the fused call takes these arguments: CUDA half, channels-last, training with running
// statistics and a momentum, channels a multiple of 4, a residual (if any) alike.
bool CudnnBatchNormReluApplies(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x,
                               const torch::Tensor& residual);
// As BatchNormAddRelu (worker/batch_norm_relu.h), running statistics and batch counter included.
torch::Tensor CudnnBatchNormAddRelu(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual);

}  // namespace dtrun::worker
