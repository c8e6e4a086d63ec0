// What a trainer must keep to continue exactly where it stopped, declared once: the model, the
// optimizer, the loss scaler and the progress. Disk checkpoints (checkpoint.h) and in-memory
// snapshots (memory_snapshot.h) both take a TrainState, so a new trainer gets both by filling
// one in.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/checkpoint.h"
#include "worker/grad_scaler.h"

namespace dtrun::worker {

struct TrainState {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;  // SGD (ForeachSgd) or Adam for snapshots
  GradScaler* scaler = nullptr;                  // optional
  Progress* progress = nullptr;
};

// One tensor of the state, by a stable name. Restoring copies into `tensor` in place, then calls
// `apply` (for values that live outside tensors: progress, the scaler, Adam's step counts);
// `reread` is its inverse, the value read into `tensor` again in place (StateListing).
struct StateTensor {
  std::string name;
  torch::Tensor tensor;
  std::function<void()> apply;
  // Written only by the optimizer step (parameters, the optimizer's state), so a snapshot may
  // copy it while the next step's forward and backward run.
  bool changes_only_in_optimizer_step = false;
  // May be missing from a snapshot an older dtrun took; a restore then leaves it as it is.
  bool optional = false;
  std::function<void()> reread = nullptr;
};

// The state as named tensors in a fixed order: progress, scaler, the CPU generator, parameters,
// buffers, then the optimizer's per-parameter state. Parameters and buffers are the model's own
// tensors; the rest are small copies whose `apply` writes them back.
std::vector<StateTensor> StateTensors(const TrainState& state);

// StateTensors kept from one call to the next: read again in place while the model, the optimizer
// and their tensors are the ones listed, listed anew otherwise. The trainer arms its state for a
// failure after every optimizer step (MemorySnapshots::Arm), and listing it anew each time (the
// names, the optimizer's per-parameter lookups, a new tensor for each value) was most of that
// cost: 0.14 ms a step for NCF, 5% of its step on one core. A tensor that changed shape in place
// (set_data) is still the one listed: whoever lays the listing out checks shapes.
class StateListing {
 public:
  // What StateTensors(state) would list now. Valid until the next call.
  const std::vector<StateTensor>& Read(const TrainState& state);
  int listed() const { return listed_; }  // how many times it listed anew

 private:
  std::vector<StateTensor> tensors_;
  std::vector<const void*> identity_, now_;
  int listed_ = 0;
};

// Creates the optimizer's per-parameter state (zeros) for every parameter that has none yet, so
// that a restore has tensors to fill (LibTorch creates it lazily at the first step).
// InvalidArgument for an optimizer other than SGD or Adam.
absl::Status MaterializeOptimizerState(torch::optim::Optimizer& optimizer);

// The optimizer's per-parameter tensors as StateTensors ("optim/<group>/<index>/<field>").
std::vector<StateTensor> OptimizerStateTensors(torch::optim::Optimizer& optimizer);

// A digest of the parameters' bytes: equal on every DDP replica after every step.
uint64_t ParameterDigest(torch::nn::Module& model);

// The replicas' fingerprint (worker/replica_check.h): XXH3 over the bytes of the parameters and
// the optimizer state, in the state's order; not the buffers (BatchNorm statistics are per rank).
// GPU tensors are copied to the host for it (a host sync; only at a check).
uint64_t ReplicaFingerprint(const TrainState& state);

}  // namespace dtrun::worker
