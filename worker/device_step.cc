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
  torch::Tensor v = values.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  return {std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel()), tag};
}

// Zeroes the gradients where they are: backward then adds into them, so a step run eagerly next
// to a CUDA graph leaves the gradients at the addresses the graph reads.
void ZeroGradients(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

// The first line of an exception's message.
std::string FirstLine(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace

void ClearGradients(torch::nn::Module& model) {
  for (torch::Tensor& p : model.parameters()) p.mutable_grad() = torch::Tensor();
}

GraphedStep::GraphedStep(torch::nn::Module& model, const torch::Device& device, bool graphs, Body body, Log log)
    : model_(model),
      device_(device),
      body_(std::move(body)),
      log_(std::move(log)),
      schedule_(graphs && device.is_cuda() && StepGraph::Supported()) {}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::Run(const torch::Tensor& pixels, const torch::Tensor& labels, int full_batch) {
  const int count = static_cast<int>(pixels.size(0)), image_size = static_cast<int>(pixels.size(1));
  CaptureSchedule::Decision d = schedule_.Next(image_size, count, full_batch);
  if (d.drop_graph) graph_.reset();  // a new size: its gradients and buffers go with it
  if (d.action == CaptureSchedule::Action::kCapture) {
    const bool captured = Capture(pixels, labels);
    schedule_.CaptureDone(captured);
    d.action = captured ? CaptureSchedule::Action::kReplay : CaptureSchedule::Action::kEager;
  }
  if (d.action == CaptureSchedule::Action::kReplay) {
    graph_pixels_.copy_(pixels, /*non_blocking=*/true);
    graph_labels_.copy_(labels, /*non_blocking=*/true);
    graph_->Replay();
    return graph_->outputs()[0];
  }
  if (d.action == CaptureSchedule::Action::kEagerBesideGraph) {
    ZeroGradients(model_);
  } else {
    ClearGradients(model_);
  }
  return body_(pixels.to(device_, /*non_blocking=*/true), labels.to(device_, /*non_blocking=*/true));
}

bool GraphedStep::Capture(const torch::Tensor& pixels, const torch::Tensor& labels) {
  const auto on = torch::TensorOptions().device(device_);
  graph_pixels_ = torch::empty(pixels.sizes(), on.dtype(torch::kUInt8));
  graph_labels_ = torch::empty(labels.sizes(), on.dtype(torch::kInt64));
  ClearGradients(model_);  // backward makes them anew, in the graph's memory
  auto graph = std::make_unique<StepGraph>();
  try {
    graph->Capture([this] { return std::vector<torch::Tensor>{body_(graph_pixels_, graph_labels_)}; });
  } catch (const std::exception& e) {
    log_("warning: the step could not be captured as a CUDA graph (" + FirstLine(e) + "); it runs eagerly");
    ClearGradients(model_);
    graph_pixels_ = graph_labels_ = torch::Tensor();
    return false;
  }
  graph_ = std::move(graph);
  log_("=> CUDA graph: the step (batch " + std::to_string(pixels.size(0)) + " at " + std::to_string(pixels.size(1)) +
       " px) is captured and replayed from now on");
  return true;
}

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
    slot.host = torch::empty({values.numel()}, torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(true));
  }
  slot.host.copy_(values.detach().reshape({-1}).to(torch::kFloat64), /*non_blocking=*/true);
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
    const double* p = slot.host.data_ptr<double>();
    out->push_back({std::vector<double>(p, p + slot.host.numel()), slot.tag});
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
