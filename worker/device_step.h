// The training step on a GPU without host syncs, and its CUDA graph (docs/DESIGN.md, "The step
// on a GPU"). The only CUDA-graph code of the worker library.
//
// StepGraph captures a step's work once and replays it: one launch for the whole forward,
// backward, loss scaling and optimizer update instead of ~1,500 kernel launches by the host. The
// captured body must queue device work only: no host read of a device value, no new input shape.
// What it returns (the step's metrics) lives in the graph's memory and is rewritten by each
// replay; so are the gradients, which backward allocated during the capture.
//
// GraphedStep runs a step as worker/capture_schedule.h says: eagerly while it warms up at a
// shape and for partial batches, then captured once and replayed with its inputs copied into the
// graph's buffers.
//
// LaggedReadback carries a step's few numbers (loss, top-1, overflow, loss scale) to the host
// behind the step, in pinned memory, and hands them over one step later, once done: the host
// then waits for the step before last while the GPU runs the last one, never for the step it has
// just queued.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/capture_schedule.h"

namespace dtrun::worker {

// Drops the gradients instead of zeroing them: backward then hands its fresh gradient tensors to
// the parameters, saving a fill and an add per parameter (PyTorch's zero_grad(set_to_none=True)).
void ClearGradients(torch::nn::Module& model);

class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Whether this build can capture a step (a CUDA build of LibTorch 2.4+: DTRUN_HAS_DEVICE_STEP).
  static bool Supported();
  // Records `body` on a side stream into the graph's own memory pool; nothing runs until Replay.
  // The tensors `body` returns are kept (they are the graph's outputs). Throws on a capture error.
  void Capture(const std::function<std::vector<torch::Tensor>()>& body);
  // Runs the captured work on the current stream, after what is queued there.
  void Replay();
  const std::vector<torch::Tensor>& outputs() const { return outputs_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<torch::Tensor> outputs_;
};

class GraphedStep {
 public:
  // Queues the whole step (forward, backward, loss scaling, optimizer) on device inputs, reading
  // nothing back; returns the step's values for the readback.
  using Body = std::function<torch::Tensor(const torch::Tensor& pixels, const torch::Tensor& labels)>;
  using Log = std::function<void(const std::string& line)>;

  // `model` (whose gradients the step makes) must outlive this object. `graphs`: whether to
  // capture (on a GPU, with a build that can: StepGraph::Supported). `log` gets a line when the
  // step is captured or could not be.
  GraphedStep(torch::nn::Module& model, const torch::Device& device, bool graphs, Body body, Log log);
  ~GraphedStep();

  // One step on a batch: uint8 NHWC pixels and int64 labels, in pinned host memory or on the
  // device; a full batch has `full_batch` images. Returns the body's values, which the next
  // replay overwrites: copy them (LaggedReadback::Push) before the next step.
  torch::Tensor Run(const torch::Tensor& pixels, const torch::Tensor& labels, int full_batch);

 private:
  bool Capture(const torch::Tensor& pixels, const torch::Tensor& labels);

  torch::nn::Module& model_;
  torch::Device device_;
  Body body_;
  Log log_;
  CaptureSchedule schedule_;
  std::unique_ptr<StepGraph> graph_;
  torch::Tensor graph_pixels_, graph_labels_;  // the graph's inputs, refilled before each replay
};

class LaggedReadback {
 public:
  struct Values {
    std::vector<double> values;  // as doubles: a 50-bit hash in a vote survives (StepAgreement)
    int64_t tag = 0;  // what the caller passed along (the step's batch size)
  };
  LaggedReadback();
  ~LaggedReadback();
  LaggedReadback(const LaggedReadback&) = delete;
  LaggedReadback& operator=(const LaggedReadback&) = delete;

  // Copies `values` (a small floating-point tensor; on a GPU, behind the work queued on the
  // current stream) for a later Take. A CPU tensor is read at once.
  void Push(const torch::Tensor& values, int64_t tag);
  // The values pushed so far, oldest first, except the newest unless `all`; waits for each.
  std::vector<Values> Take(bool all);

 private:
  // Moves the copies still on their way, all or all but the newest, to `out` once done.
  void TakePending(bool all, std::vector<Values>* out);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::deque<Values> ready_;  // read already (CPU tensors, or older copies made room for)
};

}  // namespace dtrun::worker
