#include "worker/snapshot_device_copy.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
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

namespace {

// Set by a host function that the stream runs once the work queued before it is done.
struct Reached {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

void OnReached(void* arg) {
  auto* reached = static_cast<std::shared_ptr<Reached>*>(arg);
  {
    std::lock_guard<std::mutex> lock((*reached)->mu);
    (*reached)->done = true;
  }
  (*reached)->cv.notify_all();
  delete reached;
}

// Waits at most `timeout_s` for `stream` to run what is queued on it now. A host function, not
// cudaStreamSynchronize: that has no bound, and a spinning wait would take a core.
absl::Status WaitBounded(cudaStream_t stream, double timeout_s, const char* what) {
  auto reached = std::make_shared<Reached>();
  // The host function's own reference: it may run after this wait has given up.
  auto* for_host_function = new std::shared_ptr<Reached>(reached);
  if (cudaError_t e = cudaLaunchHostFunc(stream, OnReached, for_host_function); e != cudaSuccess) {
    delete for_host_function;
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("CUDA failed waiting for ", what, ": ", cudaGetErrorString(e)));
  }
  std::unique_lock<std::mutex> lock(reached->mu);
  if (reached->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return reached->done; })) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(absl::StrFormat("%s not done within %.1f s", what, timeout_s));
}

}  // namespace

struct DeviceMark::Impl {
  c10::DeviceIndex device = -1;  // none: the state is in host memory
  at::cuda::CUDAEvent event{cudaEventDisableTiming};
};

DeviceMark::DeviceMark(const torch::Device& device) : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda()) return;
  impl_->device = device.has_index() ? device.index() : c10::cuda::current_device();
  impl_->event.record(c10::cuda::getCurrentCUDAStream(impl_->device));
}

DeviceMark::~DeviceMark() = default;

absl::Status DeviceMark::CopyAfter(const std::vector<torch::Tensor>& dsts, const std::vector<torch::Tensor>& srcs,
                                   double timeout_s) {
  if (impl_->device < 0) {
    for (size_t i = 0; i < dsts.size(); ++i) dsts[i].copy_(srcs[i]);
    return absl::OkStatus();
  }
  c10::cuda::CUDAGuard device_guard(impl_->device);
  // A stream of its own, not one of LibTorch's pool: ProcessGroupNCCL takes its streams from that
  // pool too, and the one stuck in the collective with the rank that is gone may come round.
  // Never destroyed: the caching allocator records events on it when the sources are freed.
  cudaStream_t raw = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking); e != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("no CUDA stream for the copy from the GPU: ", cudaGetErrorString(e)));
  }
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromExternal(raw, impl_->device);
  impl_->event.block(side);
  // First the mark alone: a copy into pageable memory would block this thread without a bound.
  DT_RETURN_IF_ERROR(WaitBounded(side.stream(), timeout_s, "the GPU's work up to the armed step"));
  {
    c10::cuda::CUDAStreamGuard stream_guard(side);
    for (size_t i = 0; i < dsts.size(); ++i) {
      dsts[i].copy_(srcs[i], /*non_blocking=*/true);
      // Not reused by the caching allocator before the copy, should this thread give up on it.
      if (srcs[i].is_cuda()) srcs[i].record_stream(side);
    }
  }
  return WaitBounded(side.stream(), timeout_s, "the copies from the GPU");
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
struct DeviceMark::Impl {};
DeviceMark::DeviceMark(const torch::Device&) : impl_(std::make_unique<Impl>()) {}
DeviceMark::~DeviceMark() = default;
absl::Status DeviceMark::CopyAfter(const std::vector<torch::Tensor>& dsts, const std::vector<torch::Tensor>& srcs,
                                   double) {
  for (size_t i = 0; i < dsts.size(); ++i) dsts[i].copy_(srcs[i]);
  return absl::OkStatus();
}
void HostPins::Pin(char*, size_t) {}
HostPins::~HostPins() = default;
#endif

}  // namespace dtrun::worker
