#include "worker/device_step.h"

#include "worker/torch_compat.h"  // DTRUN_HAS_DEVICE_STEP

#if DTRUN_HAS_DEVICE_STEP
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrun::worker {
namespace {

// Values on the CPU, read at once.
LaggedReadback::Values ReadNow(const torch::Tensor& values, int64_t tag) {
  torch::Tensor v = values.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return {std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + v.numel()), tag};
}

}  // namespace

std::vector<LaggedReadback::Values> LaggedReadback::Take(bool all) {
  std::vector<Values> out(std::make_move_iterator(ready_.begin()), std::make_move_iterator(ready_.end()));
  ready_.clear();
  TakePending(all, &out);
  return out;
}

#if DTRUN_HAS_DEVICE_STEP
struct StepGraph::Impl {
  at::cuda::CUDAGraph graph;
};

StepGraph::StepGraph() : impl_(std::make_unique<Impl>()) {}

bool StepGraph::Supported() { return true; }

void StepGraph::Capture(const std::function<std::vector<torch::Tensor>()>& body) {
  // Capture needs a stream other than the default one; it starts after what is queued so far.
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, current.device_index());
  at::cuda::CUDAEvent queued;
  queued.record(current);
  queued.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    impl_->graph.capture_begin();
    try {
      outputs_ = body();
    } catch (...) {
      // End the capture so that the stream and the allocator are usable again, then report.
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    impl_->graph.capture_end();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(current);
}

void StepGraph::Replay() { impl_->graph.replay(); }

// Two pinned slots in turn: the copy of step N+1 cannot overwrite step N's numbers before the
// host has read them, because Push takes the older one first when both are in use.
struct LaggedReadback::Impl {
  struct Slot {
    torch::Tensor host;
    at::cuda::CUDAEvent done;
    int64_t tag = 0;
  };
  Slot slots[2];
  std::deque<int> pending;  // slot indices, oldest first
  int next = 0;
};

LaggedReadback::LaggedReadback() : impl_(std::make_unique<Impl>()) {}

void LaggedReadback::Push(const torch::Tensor& values, int64_t tag) {
  if (!values.is_cuda()) {
    ready_.push_back(ReadNow(values, tag));
    return;
  }
  if (impl_->pending.size() == 2) {
    std::vector<Values> older;
    TakePending(/*all=*/false, &older);
    for (Values& v : older) ready_.push_back(std::move(v));
  }
  Impl::Slot& slot = impl_->slots[impl_->next];
  if (!slot.host.defined() || slot.host.numel() != values.numel()) {
    slot.host = torch::empty({values.numel()}, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
  }
  slot.host.copy_(values.detach().reshape({-1}).to(torch::kFloat32), /*non_blocking=*/true);
  slot.done.record(c10::cuda::getCurrentCUDAStream(values.device().index()));
  slot.tag = tag;
  impl_->pending.push_back(impl_->next);
  impl_->next ^= 1;
}

void LaggedReadback::TakePending(bool all, std::vector<Values>* out) {
  while (impl_->pending.size() > (all ? 0u : 1u)) {
    Impl::Slot& slot = impl_->slots[impl_->pending.front()];
    impl_->pending.pop_front();
    slot.done.synchronize();
    const float* p = slot.host.data_ptr<float>();
    out->push_back({std::vector<float>(p, p + slot.host.numel()), slot.tag});
  }
}

#else  // no CUDA graphs in this build: StepGraph is never used, LaggedReadback reads at once

struct StepGraph::Impl {};
StepGraph::StepGraph() = default;
bool StepGraph::Supported() { return false; }
void StepGraph::Capture(const std::function<std::vector<torch::Tensor>()>&) {
  TORCH_CHECK(false, "CUDA graphs need a CUDA build of LibTorch 2.4 or newer");
}
void StepGraph::Replay() { TORCH_CHECK(false, "no captured step"); }

struct LaggedReadback::Impl {};
LaggedReadback::LaggedReadback() = default;

void LaggedReadback::Push(const torch::Tensor& values, int64_t tag) { ready_.push_back(ReadNow(values, tag)); }
void LaggedReadback::TakePending(bool, std::vector<Values>*) {}
#endif

StepGraph::~StepGraph() = default;
LaggedReadback::~LaggedReadback() = default;

}  // namespace dtrun::worker
