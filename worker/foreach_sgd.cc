#include "worker/foreach_sgd.h"

#include "worker/torch_compat.h"

#include <string>
#include <vector>

namespace dtrun::worker {

torch::Tensor InLayoutOf(const torch::Tensor& t, const torch::Tensor& like) {
  if (t.strides() == like.strides()) return t;
  const at::MemoryFormat format = like.suggest_memory_format();
  if (t.sizes() == like.sizes() && t.is_contiguous(format) && like.is_contiguous(format)) {
    return t.as_strided(like.sizes(), like.strides());
  }
  return torch::empty_like(like).copy_(t);
}

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

void ForeachSgd::StepOnDevice(const torch::Tensor& lr, const torch::Tensor& found_inf) {
#if DTRUN_HAS_DEVICE_STEP
  torch::NoGradGuard no_grad;
  const std::optional<at::Tensor> overflow = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, bufs;
    bool first_step = false;  // the buffers start as the first update, as in step()
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(InLayoutOf(p.grad(), p));
      if (o.momentum() == 0) continue;
      auto& slot = state_[OptimizerStateKey(state_, p)];
      if (!slot) {
        auto state = std::make_unique<torch::optim::SGDParamState>();
        state->momentum_buffer(torch::zeros_like(p));
        slot = std::move(state);
        first_step = true;
      }
      auto& state = static_cast<torch::optim::SGDParamState&>(*slot);
      // A buffer from a checkpoint comes back contiguous: once into the parameter's layout.
      if (state.momentum_buffer().strides() != p.strides()) state.momentum_buffer(InLayoutOf(state.momentum_buffer(), p));
      bufs.push_back(state.momentum_buffer());
    }
    if (params.empty()) continue;
    at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), lr, o.dampening(), o.nesterov(),
                    /*maximize=*/false, first_step, /*grad_scale=*/std::nullopt, overflow);
  }
#else
  (void)lr;
  (void)found_inf;
  TORCH_CHECK(false, "ForeachSgd::StepOnDevice needs a CUDA build of LibTorch 2.4 or newer");
#endif
}

}  // namespace dtrun::worker
