// SyncBatchNorm: in training, batch-norm statistics over the global batch (every rank's samples)
// instead of each process's share — for small per-process batches, where per-process statistics
// are noisy. Forward all-reduces per-channel sums; backward all-reduces the two per-channel sums
// that the input gradient needs. Parameter gradients stay local: DDP averages them as usual.
// Works on CPU (Gloo) and CUDA (NCCL); the module keeps BatchNorm2d's parameters and buffers, so
// checkpoints are the same with and without it.
#pragma once

#include <torch/torch.h>

#include "worker/collective_watchdog.h"
#include "worker/process_group.h"

namespace dtrun::worker {

// Sums small per-channel statistics across ranks.
class BatchNormSync {
 public:
  BatchNormSync(ProcessGroupHandle pg, CollectiveWatchdog* watchdog = nullptr)
      : pg_(std::move(pg)), watchdog_(watchdog) {}
  virtual ~BatchNormSync() = default;
  // In place; every rank calls it in the same order (it is a collective).
  virtual void SumAcrossRanks(torch::Tensor& t);

 private:
  ProcessGroupHandle pg_;
  CollectiveWatchdog* watchdog_;
};

// bn(x) with global-batch statistics when training and `sync` is set; exactly bn->forward(x)
// otherwise (eval mode uses the running statistics, which stay identical across ranks).
torch::Tensor SyncBatchNorm(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, BatchNormSync* sync);

}  // namespace dtrun::worker
