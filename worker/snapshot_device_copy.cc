#include "worker/snapshot_device_copy.h"

#include <cstdio>
#include <optional>

#include "worker/torch_compat.h"  // DTRUN_WITH_NCCL: a CUDA LibTorch

#if DTRUN_WITH_NCCL
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace dtrun::worker {

#if DTRUN_WITH_NCCL
struct DeviceSnapshotCopy::Impl {
  std::optional<c10::cuda::CUDAStream> side;
  c10::DeviceIndex device = -1;
  bool first_phase_open = true;
  bool any = false;
  // With timing: DeviceSeconds is what a step ordered after the copies waits for them.
  at::cuda::CUDAEvent started{cudaEventDefault};
  at::cuda::CUDAEvent done{cudaEventDefault};

  // The side stream of `device`, ordered after what the current stream has queued.
  c10::cuda::CUDAStream& Side(c10::DeviceIndex d) {
    if (!side) {
      device = d;
      side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, d);
      at::cuda::CUDAEvent queued;
      queued.record(c10::cuda::getCurrentCUDAStream(d));
      queued.block(*side);
      started.record(*side);
    }
    return *side;
  }
  // The current stream waits, on the GPU, for the first phase's copies.
  void CloseFirstPhase() {
    if (!first_phase_open) return;
    first_phase_open = false;
    if (!side) return;
    at::cuda::CUDAEvent read;
    read.record(*side);
    read.block(c10::cuda::getCurrentCUDAStream(device));
  }
};

DeviceSnapshotCopy::DeviceSnapshotCopy() : impl_(std::make_unique<Impl>()) {}
DeviceSnapshotCopy::~DeviceSnapshotCopy() = default;

bool DeviceSnapshotCopy::Takes(const torch::Tensor& t) { return t.is_cuda(); }

void DeviceSnapshotCopy::Enqueue(const torch::Tensor& dst, const torch::Tensor& src,
                                 bool changes_before_optimizer_step) {
  if (!changes_before_optimizer_step) impl_->CloseFirstPhase();
  if (impl_->side && src.device().index() != impl_->device) {
    dst.copy_(src);  // a second device: not overlapped (one device per rank is the rule)
    return;
  }
  c10::cuda::CUDAStreamGuard guard(impl_->Side(src.device().index()));
  dst.copy_(src, /*non_blocking=*/true);
  impl_->any = true;
}

void DeviceSnapshotCopy::Close() {
  impl_->CloseFirstPhase();
  if (impl_->any) impl_->done.record(*impl_->side);
}

void DeviceSnapshotCopy::Wait() {
  if (impl_->any) impl_->done.synchronize();
}

bool DeviceSnapshotCopy::OrderCurrentStreamAfter() {
  if (!impl_->any) return false;
  impl_->done.block(c10::cuda::getCurrentCUDAStream(impl_->device));
  return true;
}

double DeviceSnapshotCopy::DeviceSeconds() {
  return impl_->any ? impl_->started.elapsed_time(impl_->done) / 1e3 : 0;
}

void HostPins::Pin(char* base, size_t bytes) {
  if (failed_ || bytes == 0) return;
  for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
    if (it->base != base) continue;
    if (it->bytes >= bytes) return;
    cudaHostUnregister(it->base);
    pinned_.erase(it);
    break;
  }
  if (cudaError_t e = cudaHostRegister(base, bytes, cudaHostRegisterDefault); e != cudaSuccess) {
    cudaGetLastError();  // clears it, so that LibTorch's next check does not report it
    std::fprintf(stderr, "warning: snapshot memory could not be pinned for the GPU's copy (%s); snapshots are "
                 "copied through pageable memory, with a host sync\n", cudaGetErrorString(e));
    failed_ = true;
    return;
  }
  pinned_.push_back({base, bytes});
}

HostPins::~HostPins() {
  for (const Extent& e : pinned_) cudaHostUnregister(e.base);
}
#else
struct DeviceSnapshotCopy::Impl {};
DeviceSnapshotCopy::DeviceSnapshotCopy() = default;
DeviceSnapshotCopy::~DeviceSnapshotCopy() = default;
bool DeviceSnapshotCopy::Takes(const torch::Tensor&) { return false; }
void DeviceSnapshotCopy::Enqueue(const torch::Tensor& dst, const torch::Tensor& src, bool) { dst.copy_(src); }
void DeviceSnapshotCopy::Close() {}
void DeviceSnapshotCopy::Wait() {}
bool DeviceSnapshotCopy::OrderCurrentStreamAfter() { return false; }
double DeviceSnapshotCopy::DeviceSeconds() { return 0; }
void HostPins::Pin(char*, size_t) {}
HostPins::~HostPins() = default;
#endif

}  // namespace dtrun::worker
