#include "worker/foreach_sgd.h"

#include "worker/torch_compat.h"

#include <string>
#include <vector>

namespace dtrun::worker {

torch::Tensor ForeachSgd::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads;
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (params.empty()) continue;
    std::vector<torch::Tensor> d_p = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
    if (o.momentum() != 0) {
      // A parameter's buffer starts as a copy of its first update (as in SGD); existing ones
      // decay and accumulate. `bufs` shares storage with the state, in parameter order.
      std::vector<torch::Tensor> bufs(params.size()), old_bufs, old_d_p;
      for (size_t i = 0; i < params.size(); ++i) {
        auto& slot = state_[OptimizerStateKey(state_, params[i])];
        if (!slot) {
          auto state = std::make_unique<torch::optim::SGDParamState>();
          state->momentum_buffer(torch::clone(d_p[i]).detach());
          slot = std::move(state);
        } else {
          old_bufs.push_back(static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer());
          old_d_p.push_back(d_p[i]);
        }
        bufs[i] = static_cast<torch::optim::SGDParamState&>(*slot).momentum_buffer();
      }
      if (!old_bufs.empty()) {
        at::_foreach_mul_(old_bufs, o.momentum());
        at::_foreach_add_(old_bufs, old_d_p, 1 - o.dampening());
      }
      d_p = o.nesterov() ? at::_foreach_add(d_p, bufs, o.momentum()) : bufs;
    }
    at::_foreach_add_(params, d_p, -o.lr());
  }
  return loss;
}

}  // namespace dtrun::worker
