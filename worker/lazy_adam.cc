#include "worker/lazy_adam.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "worker/torch_compat.h"
#include "worker/train_state.h"

namespace dtrun::worker {
namespace {

using torch::optim::AdamOptions;
using torch::optim::AdamParamState;

// The parameter's state, made (zeros, as Adam's first step would) by the snapshots' own
// MaterializeOptimizerState the first time a parameter has none.
AdamParamState& StateFor(torch::optim::Adam& opt, const torch::Tensor& p) {
  const auto key = OptimizerStateKey(opt.state(), p);
  auto it = opt.state().find(key);
  if (it == opt.state().end()) {
    const absl::Status made = MaterializeOptimizerState(opt);
    TORCH_CHECK(made.ok(), "LazyAdam: ", std::string(made.message()));
    it = opt.state().find(key);
  }
  return static_cast<AdamParamState&>(*it->second);
}

// Adam's update on the rows `grad` holds, in Adam's own operations on those rows.
void UpdateRows(torch::Tensor& p, const torch::Tensor& sparse_grad, const AdamOptions& o, AdamParamState& s) {
  TORCH_CHECK(!o.amsgrad(), "LazyAdam: amsgrad is not supported for sparse gradients");
  TORCH_CHECK(sparse_grad.sparse_dim() == 1, "LazyAdam: a sparse gradient must index rows (sparse_dim 1)");
  const torch::Tensor grad = sparse_grad.coalesce();  // sums repeated rows
  const torch::Tensor rows = grad.indices().reshape(-1);
  if (rows.numel() == 0) return;
  torch::Tensor g = grad.values();
  torch::Tensor param = p.index_select(0, rows);
  if (o.weight_decay() != 0) g = g.add(param, o.weight_decay());
  const auto [beta1, beta2] = o.betas();
  s.step(s.step() + 1);
  torch::Tensor exp_avg = s.exp_avg().index_select(0, rows).mul_(beta1).add_(g, 1 - beta1);
  torch::Tensor exp_avg_sq = s.exp_avg_sq().index_select(0, rows).mul_(beta2).addcmul_(g, g, 1 - beta2);
  s.exp_avg().index_copy_(0, rows, exp_avg);
  s.exp_avg_sq().index_copy_(0, rows, exp_avg_sq);
  const double bias_correction1 = 1 - std::pow(beta1, s.step());
  const double bias_correction2 = 1 - std::pow(beta2, s.step());
  const torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
  param.addcdiv_(exp_avg, denom, -o.lr() / bias_correction1);
  p.index_copy_(0, rows, param);
}

}  // namespace

torch::Tensor LazyAdam::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  // The sparse gradients' rows here; their gradients are held back while Adam updates the rest
  // (it passes over a parameter without one), then given back.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> held;
  {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const auto& options = static_cast<const AdamOptions&>(group.options());
      for (torch::Tensor& p : group.params()) {
        if (!p.grad().defined() || !p.grad().is_sparse()) continue;
        UpdateRows(p, p.grad(), options, StateFor(*this, p));
        held.emplace_back(p, p.grad());
        p.mutable_grad() = torch::Tensor();
      }
    }
  }
  torch::optim::Adam::step(nullptr);
  for (auto& [p, grad] : held) p.mutable_grad() = grad;
  return loss;
}

}  // namespace dtrun::worker
