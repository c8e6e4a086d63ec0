// The trainer behind examples/train_recsys: neural collaborative filtering (ncf_model.h) on a
// MovieLens-style ratings.csv, with DDP over Gloo (the towers through worker/ddp.h, the embedding
// tables through embedding_grad_sync.h), Adam, a rating loss (MSE) plus an interaction loss
// (binary cross-entropy against sampled unrated items), and, each epoch, test RMSE and HR@10 /
// NDCG@10 (the held-out item among sampled unrated ones) reduced across ranks. Checkpoints,
// resume, metrics.jsonl, TensorBoard and progress reports work as in train_imagenet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/train_recsys/embedding_sync.h"

namespace dtrun::recsys {

struct RecsysOptions {
  std::string ratings;            // ratings.csv
  int epochs = 5;
  int batch_size = 256;           // ratings per process and step
  double lr = 2e-3;
  double weight_decay = 1e-4;  // Adam's L2: without it the test RMSE climbs after epoch 2 on ml-latest-small
  int64_t dim = 32;
  std::vector<int64_t> hidden = {64, 32};
  int negatives = 4;              // sampled unrated items per rating (interaction loss)
  double interaction_weight = 1;  // of the interaction loss beside the rating loss
  double test_fraction = 0.1;     // each user's latest ratings held out
  int eval_negatives = 99;        // HR@10/NDCG@10: the held-out item among this many unrated ones
  EmbeddingSync embedding_sync = EmbeddingSync::kSparse;  // embedding_grad_sync.h
  // Adam updates only the table rows a step used (worker/lazy_adam.h): a step's cost follows the
  // batch instead of the tables' size. Needs the sparse embedding sync.
  bool lazy_adam = false;
  uint64_t seed = 0;
  int threads = 0;                // intra-op threads (0: torch default / OMP_NUM_THREADS)
  int print_freq = 50;
  std::string output_dir = "runs/recsys";
  double save_every_minutes = 2;
  int keep_checkpoints = 3;
  std::string resume;             // a checkpoint; default: the newest in output_dir/checkpoints
  double collective_timeout_s = 600;
  bool tensorboard = true;
  // Benchmark mode: after `warmup_iters`, time `timed_iters` steps, print ratings/s, stop.
  int warmup_iters = 5;
  int timed_iters = 0;
  std::string bench_json;
};

// Returns the process exit code. Logs from rank 0.
int RunRecsysTraining(const RecsysOptions& options);

}  // namespace dtrun::recsys
