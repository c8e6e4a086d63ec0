#include "examples/train_recsys/ncf_model.h"

namespace dtrun::recsys {
namespace {

torch::nn::Embedding Table(int64_t rows, int64_t dim, bool sparse, double init_std) {
  torch::nn::Embedding e(torch::nn::EmbeddingOptions(rows, dim).sparse(sparse));
  torch::NoGradGuard no_grad;
  e->weight.normal_(0, init_std);
  return e;
}

}  // namespace

NcfTablesImpl::NcfTablesImpl(const NcfOptions& o)
    : user(register_module("user", Table(o.users, o.dim, o.sparse_gradients, 0.05))),
      item(register_module("item", Table(o.items, o.dim, o.sparse_gradients, 0.05))),
      user_bias(register_module("user_bias", Table(o.users, 1, o.sparse_gradients, 0.0))),
      item_bias(register_module("item_bias", Table(o.items, 1, o.sparse_gradients, 0.0))) {}

NcfTowersImpl::NcfTowersImpl(const NcfOptions& o) {
  mlp = register_module("mlp", torch::nn::Sequential());
  int64_t in = 3 * o.dim;
  for (int64_t width : o.hidden) {
    mlp->push_back(torch::nn::Linear(in, width));
    mlp->push_back(torch::nn::ReLU());
    in = width;
  }
  rating_head = register_module("rating_head", torch::nn::Linear(in, 1));
  interaction_head = register_module("interaction_head", torch::nn::Linear(in, 1));
}

NcfImpl::NcfImpl(const NcfOptions& o)
    : tables_(register_module("tables", NcfTables(o))),
      towers_(register_module("towers", NcfTowers(o))),
      global_mean_(register_buffer("global_mean", torch::full({1}, o.global_mean))) {}

NcfOutput NcfImpl::forward(const torch::Tensor& users, const torch::Tensor& items) {
  torch::Tensor u = tables_->user(users), i = tables_->item(items);
  torch::Tensor h = towers_->mlp->forward(torch::cat({u, i, u * i}, 1));
  torch::Tensor bias = tables_->user_bias(users).squeeze(1) + tables_->item_bias(items).squeeze(1);
  return {global_mean_ + bias + towers_->rating_head(h).squeeze(1), towers_->interaction_head(h).squeeze(1)};
}

}  // namespace dtrun::recsys
