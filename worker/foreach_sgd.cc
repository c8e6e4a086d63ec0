#include "worker/foreach_sgd.h"

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace dtrun::worker {
namespace {

// The optimizer's state key for `p`: LibTorch 1.x keys by the TensorImpl address printed as a
// string, 2.x by the address itself.
template <class Map>
typename Map::key_type StateKey(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace

torch::Tensor ForeachSgd::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (torch::optim::OptimizerParamGroup& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, bufs;
    bool every_buffer_exists = true;
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      params.push_back(p);
      grads.push_back(p.grad());
      auto it = state_.find(StateKey(state_, p));
      if (it == state_.end()) {
        every_buffer_exists = false;
      } else {
        bufs.push_back(static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
      }
    }
    if (params.empty()) continue;
    if (o.momentum() != 0 && !every_buffer_exists) {
      // First step of this group: the buffers start as copies of the gradients, as in SGD.
      std::vector<torch::Tensor> d_p = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay())
                                                              : grads;
      for (size_t i = 0; i < params.size(); ++i) {
        auto state = std::make_unique<torch::optim::SGDParamState>();
        state->momentum_buffer(torch::clone(d_p[i]).detach());
        bufs.push_back(state->momentum_buffer());
        state_[StateKey(state_, params[i])] = std::move(state);
      }
      bufs.erase(bufs.begin(), bufs.end() - static_cast<std::ptrdiff_t>(params.size()));
      if (o.nesterov()) d_p = at::_foreach_add(d_p, bufs, o.momentum());
      else d_p = bufs;
      at::_foreach_add_(params, d_p, -o.lr());
      continue;
    }
    std::vector<torch::Tensor> d_p = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
    if (o.momentum() != 0) {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_add_(bufs, d_p, 1 - o.dampening());
      if (o.nesterov()) d_p = at::_foreach_add(d_p, bufs, o.momentum());
      else d_p = bufs;
    }
    at::_foreach_add_(params, d_p, -o.lr());
  }
  return loss;
}

}  // namespace dtrun::worker
