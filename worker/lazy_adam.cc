#include "worker/lazy_adam.h"

#include <cmath>
#include <tuple>
#include <utility>

#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

using torch::optim::AdamOptions;
using torch::optim::AdamParamState;

AdamParamState& StateFor(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto& slot = opt.state()[OptimizerStateKey(opt.state(), p)];
  if (!slot) {
    auto s = std::make_unique<AdamParamState>();
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(s);
  }
  return static_cast<AdamParamState&>(*slot);
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
