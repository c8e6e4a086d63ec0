// Data-parallel training in C++: parameters and buffers broadcast from rank 0 at start; gradients
// all-reduced in buckets (~25 MB) launched from autograd hooks once a bucket's gradients are
// accumulated, so communication overlaps the rest of backward; averaged over the world. Buckets
// launch in one fixed order on every rank (as PyTorch's reducer does), since collectives pair by
// the order of the calls, whatever order backward made the gradients in. NoSync
// skips communication for gradient accumulation; BN buffers can be broadcast before each forward.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <torch/torch.h>

#include "worker/collective_watchdog.h"
#include "worker/process_group.h"
#include "worker/sync_stopwatch.h"

namespace dtrun::worker {

// Rank 0's values of `tensors` on every rank (one flattened broadcast).
void BroadcastFromRankZero(ProcessGroupHandle& pg, std::vector<torch::Tensor> tensors);

struct DdpOptions {
  double bucket_mb = 25;
  bool broadcast_buffers = true;  // BN running stats from rank 0 before every forward
  bool overlap = true;            // false: all-reduce after backward (for measuring the overlap)
  CollectiveWatchdog* watchdog = nullptr;  // bounds every wait on a collective
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroupHandle pg, int world_size,
                          DdpOptions options = {});
  ~DistributedDataParallel();

  // Before forward: rank 0's buffers (when broadcast_buffers).
  void SyncBuffers();
  // After backward: waits for every bucket and leaves the averaged gradients in param.grad().
  void FinishGradientSync();

  // For the straggler watch (docs/DESIGN.md, "Stragglers"): how long this rank waited for the
  // buckets' all-reduces after its backward (the last rank to arrive waits least) in the newest
  // synced step whose times are known, and the time since the step before it ended. On CUDA
  // that is the step before the last one (GPU time, read without a sync; worker/sync_stopwatch.h).
  const std::optional<SyncStopwatch::Lap>& last_sync() const { return stopwatch_.newest(); }

  // While alive, backward passes accumulate locally without communication.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp) { ddp_.sync_ = false; }
    ~NoSync() { ddp_.sync_ = true; }

   private:
    DistributedDataParallel& ddp_;
  };

 private:
  struct Bucket;
  void OnGradReady(size_t param);
  // Launches the full buckets from next_launch_ on, up to the first that is not full.
  void LaunchFullInOrder();
  void Launch(Bucket& bucket);

  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroupHandle pg_;
  int world_size_;
  DdpOptions options_;
  std::vector<torch::Tensor> params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::pair<size_t, int64_t>> where_;  // param → (bucket, offset)
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive for the hooks
  bool sync_ = true;
  size_t next_launch_ = 0;  // buckets [0, next_launch_) are launched this step
  SyncStopwatch stopwatch_;
};

}  // namespace dtrun::worker
