// Adam for models with embedding tables: a parameter whose gradient is sparse (an
// nn::Embedding built with sparse(true), or a sparse gradient a trainer synchronised) is updated
// lazily, as PyTorch's SparseAdam does: only the rows the gradient holds, and only their moments,
// with the table's step count for the bias corrections; weight decay applies to those rows. Its
// cost per step then follows the batch, not the table: dense Adam reads and writes every row's
// parameter and two moments every step, the whole of a table of millions of rows for the few
// thousand a batch used. A parameter with a dense gradient gets Adam's own update.
//
// When a step's gradient holds every row, the update is dense Adam's, in the same operations.
// It is an Adam (state, options, checkpoints and snapshots as Adam's); amsgrad is refused for
// sparse gradients.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace dtrun::worker {

class LazyAdam : public torch::optim::Adam {
 public:
  LazyAdam(std::vector<torch::Tensor> params, torch::optim::AdamOptions options)
      : torch::optim::Adam(std::move(params), options) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace dtrun::worker
