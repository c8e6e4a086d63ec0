// Gradient averaging for embedding tables across ranks, two ways:
//  - dense: every table's full gradient in one all-reduce (rows × dim floats, whatever the batch
//    touched);
//  - sparse: each rank's touched rows only (the tables are built with sparse gradients): the row
//    counts of all tables in one all-gather, then their row indices and values in another, padded
//    to the largest count; every rank sums them into a dense gradient. Its traffic scales with the
//    batch, not with the tables.
// docs/BENCHMARKS.md has both measured; `sparse` is train_recsys's default.
#pragma once

#include <string>
#include <vector>

#include <torch/torch.h>

#include "examples/train_recsys/embedding_sync.h"
#include "worker/collective_watchdog.h"
#include "worker/process_group.h"

namespace dtrun::recsys {


class EmbeddingGradSync {
 public:
  // Broadcasts the tables from rank 0, so every rank starts from the same rows. `sparse_result`
  // (sparse mode only): the averaged gradients stay sparse, the rows any rank touched, for an
  // optimizer that updates those rows only (worker/lazy_adam.h).
  EmbeddingGradSync(std::vector<torch::Tensor> tables, worker::ProcessGroupHandle pg, int world_size,
                    EmbeddingSync mode, worker::CollectiveWatchdog* watchdog, bool sparse_result = false);
  // After backward: leaves each table's averaged gradient in its grad(), dense unless
  // `sparse_result`.
  void Synchronize();
  // Floats sent by this rank in the last Synchronize (for the benchmark).
  int64_t last_floats_sent() const { return last_floats_sent_; }

 private:
  void SynchronizeDense();
  void SynchronizeSparse();
  // The gathered blocks of every rank (`all`, each rank's rows first, then padding; `counts`:
  // rows per rank and table) as table `t`'s averaged gradient: sparse or dense.
  torch::Tensor GatheredGradient(size_t t, const std::vector<torch::Tensor>& all,
                                 const std::vector<torch::Tensor>& counts, const std::vector<int64_t>& most) const;

  std::vector<torch::Tensor> tables_;
  worker::ProcessGroupHandle pg_;
  int world_size_;
  EmbeddingSync mode_;
  worker::CollectiveWatchdog* watchdog_;
  bool sparse_result_;
  int64_t last_floats_sent_ = 0;
};

}  // namespace dtrun::recsys
