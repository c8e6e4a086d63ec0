// ResNet-18/34/50/101/152 with torchvision's module layout and parameter names
// (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc, …), so weights map one to one.
#pragma once

#include <string>

#include <torch/torch.h>

#include "worker/batch_norm_relu.h"

namespace dtrun::worker {

struct ResNetOptions {
  std::string arch = "resnet18";
  int num_classes = 1000;
  bool zero_init_residual = false;  // last BN of each block starts at 0 (fast ImageNet recipes)
};

// A torch::nn::Module holding the network; forward(x) takes NCHW float input.
class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  torch::Tensor forward(torch::Tensor x);
  // Training with batch statistics over all ranks (SyncBatchNorm), or per process when null.
  // Parameter names and checkpoints are the same either way.
  void SetBatchNormSync(std::shared_ptr<BatchNormSync> sync) { norm_->sync = std::move(sync); }
  // Fused BatchNorm(+add)+ReLU CPU kernels (default) or ATen's separate operations.
  void SetFusedBatchNorm(bool fused) { norm_->fused = fused; }
  void SetCudnnBatchNormRelu(bool on) { norm_->cudnn = on; }

 private:
  std::shared_ptr<NormalizationMode> norm_ = std::make_shared<NormalizationMode>();
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// InvalidArgument-style check for --arch values.
bool IsKnownArch(const std::string& arch);

}  // namespace dtrun::worker
