#include "worker/cudnn_batch_norm_relu.h"

#include <climits>

#if DTRUN_WITH_CUDNN
#include <c10/cuda/CUDAStream.h>
#include <cudnn.h>

#include <map>
#endif

namespace dtrun::worker {

#if DTRUN_WITH_CUDNN
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Persistent: the NHWC kernels PyTorch's own batch norm runs on channels-last half tensors.
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

void Check(cudnnStatus_t status, const char* call) {
  TORCH_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN ", call, ": ", cudnnGetErrorString(status));
}

// One call's descriptors: the activations (NHWC half), batch norm's per-channel float tensors, ReLU.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, channel = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;

  explicit Descriptors(const torch::Tensor& t) {
    Check(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    Check(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, static_cast<int>(t.size(0)),
                                     static_cast<int>(t.size(1)), static_cast<int>(t.size(2)),
                                     static_cast<int>(t.size(3))),
          "cudnnSetTensor4dDescriptor");
    Check(cudnnCreateTensorDescriptor(&channel), "cudnnCreateTensorDescriptor");
    Check(cudnnDeriveBNTensorDescriptor(channel, x, kMode), "cudnnDeriveBNTensorDescriptor");
    Check(cudnnCreateActivationDescriptor(&relu), "cudnnCreateActivationDescriptor");
    Check(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
  }
  ~Descriptors() {
    if (relu) cudnnDestroyActivationDescriptor(relu);
    if (channel) cudnnDestroyTensorDescriptor(channel);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

cudnnBatchNormOps_t Ops(bool add) {
  return add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

// A handle per thread and device (the autograd engine runs backward on a thread of its own), made
// at its first use, which is in an eager step and never inside a captured one, and kept for the
// process's life; set to the current stream at every call. Not ATen's: LibTorch built without
// cuDNN (Debian's) has none.
cudnnHandle_t Handle() {
  thread_local std::map<int, cudnnHandle_t> handles;
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  cudnnHandle_t& handle = handles[stream.device_index()];
  if (handle == nullptr) Check(cudnnCreate(&handle), "cudnnCreate");
  Check(cudnnSetStream(handle, stream.stream()), "cudnnSetStream");
  return handle;
}

torch::Tensor Bytes(size_t n, const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(n)}, like.options().dtype(torch::kUInt8));
}

struct FusedFunction : public torch::autograd::Function<FusedFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor residual, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps) {
    const bool add = residual.defined();
    const Descriptors d(x);
    cudnnHandle_t handle = Handle();
    size_t workspace_bytes = 0, reserve_bytes = 0;
    Check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, kMode, Ops(add), d.x, add ? d.x : nullptr,
                                                                   d.x, d.channel, d.relu, &workspace_bytes),
          "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    Check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, Ops(add), d.relu, d.x, &reserve_bytes),
          "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    torch::Tensor y = torch::empty_like(x);
    const auto f32 = weight.options().dtype(torch::kFloat32);
    torch::Tensor save_mean = torch::empty({x.size(1)}, f32), save_invstd = torch::empty({x.size(1)}, f32);
    torch::Tensor workspace = Bytes(workspace_bytes, x), reserve = Bytes(reserve_bytes, x);
    const float one = 1, zero = 0;
    Check(cudnnBatchNormalizationForwardTrainingEx(
              handle, kMode, Ops(add), &one, &zero, d.x, x.data_ptr(), add ? d.x : nullptr,
              add ? residual.data_ptr() : nullptr, d.x, y.data_ptr(), d.channel, weight.data_ptr(), bias.data_ptr(),
              momentum, running_mean.data_ptr(), running_var.data_ptr(), eps, save_mean.data_ptr(),
              save_invstd.data_ptr(), d.relu, workspace.data_ptr(), workspace_bytes, reserve.data_ptr(), reserve_bytes),
          "cudnnBatchNormalizationForwardTrainingEx");
    ctx->save_for_backward({x, y, weight, bias, save_mean, save_invstd, reserve});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["add"] = add;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &bias = saved[3], &mean = saved[4],
                        &invstd = saved[5], &reserve = saved[6];
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool add = ctx->saved_data["add"].toBool();
    const torch::Tensor dy = grads[0].to(torch::kHalf).contiguous(torch::MemoryFormat::ChannelsLast);
    const Descriptors d(x);
    cudnnHandle_t handle = Handle();
    size_t workspace_bytes = 0;
    Check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, kMode, Ops(add), d.x, d.x, d.x,
                                                            add ? d.x : nullptr, d.x, d.channel, d.relu,
                                                            &workspace_bytes),
          "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    torch::Tensor workspace = Bytes(workspace_bytes, x);
    torch::Tensor dx = torch::empty_like(x), dz = add ? torch::empty_like(x) : torch::Tensor();
    torch::Tensor dweight = torch::empty_like(weight), dbias = torch::empty_like(bias);
    const float one = 1, zero = 0;
    Check(cudnnBatchNormalizationBackwardEx(
              handle, kMode, Ops(add), &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x, y.data_ptr(), d.x,
              dy.data_ptr(), add ? d.x : nullptr, add ? dz.data_ptr() : nullptr, d.x, dx.data_ptr(), d.channel,
              weight.data_ptr(), bias.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), eps, mean.data_ptr(),
              invstd.data_ptr(), d.relu, workspace.data_ptr(), workspace_bytes, reserve.data_ptr(),
              static_cast<size_t>(reserve.numel())),
          "cudnnBatchNormalizationBackwardEx");
    return {dx, dweight, dbias, dz, {}, {}, {}, {}};
  }
};

bool ChannelsLastHalf(const torch::Tensor& t) {
  return t.is_cuda() && t.dim() == 4 && t.scalar_type() == torch::kHalf &&
         t.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

bool CudnnBatchNormReluBuilt() { return true; }

bool CudnnBatchNormReluApplies(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x,
                               const torch::Tensor& residual) {
  const auto& o = bn->options;
  return bn->is_training() && o.affine() && o.track_running_stats() && o.momentum().has_value() &&
         o.eps() >= CUDNN_BN_MIN_EPSILON && ChannelsLastHalf(x) && x.numel() > 0 && x.size(1) % 4 == 0 &&
         x.size(0) < INT_MAX && x.size(2) < INT_MAX && x.size(3) < INT_MAX && bn->weight.scalar_type() == torch::kFloat32 &&
         bn->running_mean.scalar_type() == torch::kFloat32 &&
         (!residual.defined() || (ChannelsLastHalf(residual) && residual.sizes() == x.sizes()));
}

torch::Tensor CudnnBatchNormAddRelu(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& residual) {
  {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked.add_(1);
  }
  return FusedFunction::apply(x, bn->weight, bn->bias, residual, bn->running_mean, bn->running_var,
                              *bn->options.momentum(), bn->options.eps());
}

#else  // built without cuDNN

bool CudnnBatchNormReluBuilt() { return false; }
bool CudnnBatchNormReluApplies(const torch::nn::BatchNorm2d&, const torch::Tensor&, const torch::Tensor&) {
  return false;
}
torch::Tensor CudnnBatchNormAddRelu(torch::nn::BatchNorm2d&, const torch::Tensor&, const torch::Tensor&) {
  TORCH_CHECK(false, "this build has no cuDNN (its header and library were not found at build time)");
}
#endif

}  // namespace dtrun::worker
