#include "worker/resnet.h"

#include <map>
#include <vector>

#include "worker/batch_norm_relu.h"
#include "worker/sync_batch_norm.h"

namespace dtrun::worker {
namespace {

namespace nn = torch::nn;

struct ArchSpec {
  bool bottleneck;
  std::vector<int> blocks;
};
const std::map<std::string, ArchSpec>& Archs() {
  static const std::map<std::string, ArchSpec> archs = {
      {"resnet18", {false, {2, 2, 2, 2}}},  {"resnet34", {false, {3, 4, 6, 3}}},
      {"resnet50", {true, {3, 4, 6, 3}}},   {"resnet101", {true, {3, 4, 23, 3}}},
      {"resnet152", {true, {3, 8, 36, 3}}},
  };
  return archs;
}

nn::Conv2d Conv(int in, int out, int k, int stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// torchvision's BasicBlock (expansion 1) and Bottleneck (expansion 4, stride on the 3x3).
class BlockImpl : public nn::Module {
 public:
  BlockImpl(bool bottleneck, int in, int planes, int stride, bool zero_init, std::shared_ptr<NormalizationMode> norm)
      : bottleneck_(bottleneck), norm_(std::move(norm)) {
    const int out = planes * (bottleneck ? 4 : 1);
    if (bottleneck) {
      conv1 = register_module("conv1", Conv(in, planes, 1));
      bn1 = register_module("bn1", nn::BatchNorm2d(planes));
      conv2 = register_module("conv2", Conv(planes, planes, 3, stride));
      bn2 = register_module("bn2", nn::BatchNorm2d(planes));
      conv3 = register_module("conv3", Conv(planes, out, 1));
      bn3 = register_module("bn3", nn::BatchNorm2d(out));
    } else {
      conv1 = register_module("conv1", Conv(in, planes, 3, stride));
      bn1 = register_module("bn1", nn::BatchNorm2d(planes));
      conv2 = register_module("conv2", Conv(planes, planes, 3));
      bn2 = register_module("bn2", nn::BatchNorm2d(planes));
    }
    if (stride != 1 || in != out) {
      downsample_conv = Conv(in, out, 1, stride);
      downsample_bn = nn::BatchNorm2d(out);
      // torchvision's names: downsample.0 (conv) and downsample.1 (bn).
      downsample = register_module("downsample", nn::Sequential(downsample_conv, downsample_bn));
    }
    if (zero_init) torch::nn::init::zeros_((bottleneck ? bn3 : bn2)->weight);
  }

  torch::Tensor forward(torch::Tensor x) {
    // torchvision's relu(bn(conv(x))) and relu(bn(conv(y)) + identity), each normalisation fused
    // with its ReLU and residual add.
    const NormalizationMode& mode = *norm_;
    torch::Tensor identity = downsample ? SyncBatchNorm(downsample_bn, downsample_conv(x), mode.sync.get()) : x;
    torch::Tensor y = BatchNormAddRelu(bn1, conv1(x), {}, mode);
    if (bottleneck_) {
      y = BatchNormAddRelu(bn2, conv2(y), {}, mode);
      return BatchNormAddRelu(bn3, conv3(y), identity, mode);
    }
    return BatchNormAddRelu(bn2, conv2(y), identity, mode);
  }

 private:
  bool bottleneck_;
  std::shared_ptr<NormalizationMode> norm_;
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr}, downsample_conv{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr}, downsample_bn{nullptr};
  nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

bool IsKnownArch(const std::string& arch) { return Archs().count(arch) > 0; }

ResNetImpl::ResNetImpl(const ResNetOptions& o) {
  const ArchSpec& spec = Archs().at(o.arch);
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)));
  bn1 = register_module("bn1", nn::BatchNorm2d(64));
  int in = 64;
  const int expansion = spec.bottleneck ? 4 : 1;
  nn::Sequential* layers[4] = {&layer1, &layer2, &layer3, &layer4};
  for (int l = 0; l < 4; ++l) {
    const int planes = 64 << l;
    nn::Sequential seq;
    for (int b = 0; b < spec.blocks[l]; ++b) {
      seq->push_back(Block(spec.bottleneck, in, planes, b == 0 && l > 0 ? 2 : 1, o.zero_init_residual, norm_));
      in = planes * expansion;
    }
    *layers[l] = register_module("layer" + std::to_string(l + 1), seq);
  }
  fc = register_module("fc", nn::Linear(512 * expansion, o.num_classes));
  // torchvision's initialisation: Kaiming-normal (fan_out) convolutions; BatchNorm starts at
  // weight 1, bias 0 (LibTorch's default), except the zero-initialised residual ones above.
  torch::NoGradGuard no_grad;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* conv = m->as<nn::Conv2d>()) nn::init::kaiming_normal_(conv->weight, 0, torch::kFanOut, torch::kReLU);
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = torch::max_pool2d(BatchNormAddRelu(bn1, conv1(x), {}, *norm_), 3, 2, 1);
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc(x);
}

}  // namespace dtrun::worker
