// When the training step on a GPU runs eagerly, is captured as a CUDA graph, or is replayed
// (worker/device_step.h, GraphedStep; docs/DESIGN.md, "The step on a GPU"). Plain bookkeeping,
// no LibTorch, so every shape change is tested without a GPU; one thread.
//
// A graph holds one input shape (image size and batch). At a new shape of full batches the step
// first runs eagerly kEagerStepsBeforeCapture times: cuDNN times its algorithms and the optimizer
// makes its state in the first one, and a capture wants neither inside it. Then the step is
// captured and replayed from then on. A partial batch (an epoch's last) runs eagerly beside the
// graph, which is kept for the next epoch. A new full shape (progressive resizing) drops the graph
// and warms up again. A capture that fails turns graphs off for the rest of the run.
#pragma once

#include <utility>

namespace dtrun::worker {

class CaptureSchedule {
 public:
  static constexpr int kEagerStepsBeforeCapture = 3;

  enum class Action {
    kEager,             // no graph: backward may make the gradients anew
    kEagerBesideGraph,  // a graph of another shape is kept: gradients stay where it reads them
    kCapture,           // capture the step, then replay it (CaptureDone says whether it worked)
    kReplay,
  };
  struct Decision {
    Action action = Action::kEager;
    bool drop_graph = false;  // the graph held is for another full shape: free it first
  };

  // `graphs`: whether to capture at all (--no-cuda-graphs, or a build that cannot).
  explicit CaptureSchedule(bool graphs) : graphs_(graphs) {}

  // How to run a step of `count` images at `image_size` pixels, where a full batch has `full_batch`.
  Decision Next(int image_size, int count, int full_batch);
  // After kCapture: whether the capture worked. A failure turns graphs off; that step then runs
  // eagerly.
  void CaptureDone(bool ok);

  bool graphs() const { return graphs_; }
  bool has_graph() const { return has_graph_; }

 private:
  bool graphs_;
  bool has_graph_ = false;
  std::pair<int, int> shape_{0, 0};  // (image size, batch) of the graph and of the warm-up count
  int eager_steps_at_shape_ = 0;
};

}  // namespace dtrun::worker
