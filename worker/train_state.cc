#include "worker/train_state.h"

#include "absl/strings/str_cat.h"
#include "snapshot/payload_toc.h"
#include "snapshot/snapshot_region.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {
namespace {

template <class StateT>
StateT* StateOf(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto it = opt.state().find(OptimizerStateKey(opt.state(), p));
  return it == opt.state().end() ? nullptr : dynamic_cast<StateT*>(it->second.get());
}

bool IsSgd(torch::optim::Optimizer& opt) { return dynamic_cast<torch::optim::SGD*>(&opt) != nullptr; }
bool IsAdam(torch::optim::Optimizer& opt) { return dynamic_cast<torch::optim::Adam*>(&opt) != nullptr; }

std::vector<StateTensor> ProgressTensors(Progress* p) {
  auto ints = torch::tensor({p->epoch, p->next_batch, p->global_step}, torch::kInt64);
  auto acc = torch::tensor({p->best_acc1}, torch::kFloat64);
  auto global_batch = torch::tensor({p->global_batch}, torch::kInt64);
  return {{"progress/ints", ints, [p, ints] {
             p->epoch = ints[0].item<int64_t>();
             p->next_batch = ints[1].item<int64_t>();
             p->global_step = ints[2].item<int64_t>();
           }},
          {"progress/best_acc1", acc, [p, acc] { p->best_acc1 = acc[0].item<double>(); }},
          {"progress/global_batch", global_batch,
           [p, global_batch] { p->global_batch = global_batch[0].item<int64_t>(); }, false, /*optional=*/true}};
}

}  // namespace

std::vector<StateTensor> OptimizerStateTensors(torch::optim::Optimizer& opt) {
  std::vector<StateTensor> out;
  const bool sgd = IsSgd(opt), adam = IsAdam(opt);
  for (size_t g = 0; g < opt.param_groups().size(); ++g) {
    const auto& params = opt.param_groups()[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string prefix = absl::StrCat("optim/", g, "/", i, "/");
      if (sgd) {
        if (auto* s = StateOf<torch::optim::SGDParamState>(opt, params[i]); s && s->momentum_buffer().defined()) {
          out.push_back({prefix + "momentum_buffer", s->momentum_buffer(), nullptr, true});
        }
      } else if (adam) {
        auto* s = StateOf<torch::optim::AdamParamState>(opt, params[i]);
        if (s == nullptr) continue;
        auto step = torch::tensor({s->step()}, torch::kInt64);
        out.push_back({prefix + "step", step, [s, step] { s->step(step[0].item<int64_t>()); }});
        out.push_back({prefix + "exp_avg", s->exp_avg(), nullptr, true});
        out.push_back({prefix + "exp_avg_sq", s->exp_avg_sq(), nullptr, true});
        if (s->max_exp_avg_sq().defined()) out.push_back({prefix + "max_exp_avg_sq", s->max_exp_avg_sq(), nullptr, true});
      }
    }
  }
  return out;
}

absl::Status MaterializeOptimizerState(torch::optim::Optimizer& opt) {
  const bool sgd = IsSgd(opt), adam = IsAdam(opt);
  if (!sgd && !adam) return absl::InvalidArgumentError("in-memory snapshots know SGD and Adam only");
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      auto& slot = opt.state()[OptimizerStateKey(opt.state(), p)];
      if (slot) continue;
      if (sgd) {
        if (static_cast<torch::optim::SGDOptions&>(group.options()).momentum() == 0) continue;
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(s);
      } else {
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (static_cast<torch::optim::AdamOptions&>(group.options()).amsgrad()) {
          s->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        }
        slot = std::move(s);
      }
    }
  }
  return absl::OkStatus();
}

std::vector<StateTensor> StateTensors(const TrainState& state) {
  std::vector<StateTensor> out = ProgressTensors(state.progress);
  if (GradScaler* scaler = state.scaler) {
    // On the GPU with the captured step: read back only when restored.
    torch::Tensor t = scaler->StateTensor();
    out.push_back({"scaler", t, [scaler, t] { scaler->SetState(t); }});
  }
  {
    // The default CPU generator: anything drawn from it after the restore is drawn as it would
    // have been without the crash.
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    torch::Tensor rng = gen.get_state();
    out.push_back({"rng/cpu", rng, [rng] {
                     at::Generator g = at::detail::getDefaultCPUGenerator();
                     std::lock_guard<std::mutex> l(g.mutex());
                     g.set_state(rng);
                   }});
  }
  for (const auto& p : state.model->named_parameters(/*recurse=*/true)) out.push_back({"param/" + p.key(), p.value(), nullptr, true});
  for (const auto& b : state.model->named_buffers(/*recurse=*/true)) out.push_back({"buffer/" + b.key(), b.value(), nullptr});
  for (StateTensor& t : OptimizerStateTensors(*state.optimizer)) out.push_back(std::move(t));
  return out;
}

uint64_t ReplicaFingerprint(const TrainState& state) {
  snapshot::PayloadHasher hasher;
  torch::NoGradGuard no_grad;
  for (const StateTensor& t : StateTensors(state)) {
    if (!t.changes_only_in_optimizer_step) continue;
    const torch::Tensor c = t.tensor.detach().to(torch::kCPU).contiguous();
    hasher.Update(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return hasher.Digest();
}

uint64_t ParameterDigest(torch::nn::Module& model) {
  uint64_t h = 0;
  for (const torch::Tensor& p : model.parameters()) {
    torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    h = h * 1099511628211ull ^ snapshot::PayloadHash(c.data_ptr(), c.nbytes());
  }
  return h;
}

}  // namespace dtrun::worker
