// Neural collaborative filtering for explicit ratings: user and item embeddings with per-user and
// per-item biases (the "tables"), and an MLP over [user, item, user*item] (the "towers") with two
// heads: the rating (global mean + biases + MLP) and an interaction logit (did the user rate this
// item at all?) that ranks items for HR@10/NDCG@10. The tables are kept apart from the towers so
// that their gradients can be synchronised differently (embedding_grad_sync.h).
#pragma once

#include <vector>

#include <torch/torch.h>

namespace dtrun::recsys {

struct NcfOptions {
  int64_t users = 0, items = 0;
  int64_t dim = 32;
  std::vector<int64_t> hidden = {64, 32};
  bool sparse_gradients = false;  // the tables' gradients as sparse tensors (only the rows a batch used)
  float global_mean = 3.5f;       // the rating head's starting point: the training ratings' mean
};

struct NcfTablesImpl : torch::nn::Module {
  explicit NcfTablesImpl(const NcfOptions& o);
  torch::nn::Embedding user{nullptr}, item{nullptr}, user_bias{nullptr}, item_bias{nullptr};
};
TORCH_MODULE(NcfTables);

struct NcfTowersImpl : torch::nn::Module {
  explicit NcfTowersImpl(const NcfOptions& o);
  torch::nn::Sequential mlp{nullptr};
  torch::nn::Linear rating_head{nullptr}, interaction_head{nullptr};
};
TORCH_MODULE(NcfTowers);

struct NcfOutput {
  torch::Tensor rating;       // [N] predicted stars
  torch::Tensor interaction;  // [N] logit that the user rates the item
};

class NcfImpl : public torch::nn::Module {
 public:
  explicit NcfImpl(const NcfOptions& o);
  NcfOutput forward(const torch::Tensor& users, const torch::Tensor& items);
  NcfTables tables() const { return tables_; }
  NcfTowers towers() const { return towers_; }

 private:
  NcfTables tables_{nullptr};
  NcfTowers towers_{nullptr};
  torch::Tensor global_mean_;  // buffer: part of the checkpoint
};
TORCH_MODULE(Ncf);

}  // namespace dtrun::recsys
