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
  return {
      {"progress/ints", ints,
       [p, ints] {
         p->epoch = ints[0].item<int64_t>();
         p->next_batch = ints[1].item<int64_t>();
         p->global_step = ints[2].item<int64_t>();
       },
       false, false,
       [p, ints] {
         int64_t* v = ints.data_ptr<int64_t>();
         v[0] = p->epoch;
         v[1] = p->next_batch;
         v[2] = p->global_step;
       }},
      {"progress/best_acc1", acc, [p, acc] { p->best_acc1 = acc[0].item<double>(); }, false, false,
       [p, acc] { *acc.data_ptr<double>() = p->best_acc1; }},
      {"progress/global_batch", global_batch, [p, global_batch] { p->global_batch = global_batch[0].item<int64_t>(); },
       false, /*optional=*/true, [p, global_batch] { *global_batch.data_ptr<int64_t>() = p->global_batch; }}};
}

// The default CPU generator's state: anything drawn from it after the restore is drawn as it would
// have been without the crash.
StateTensor CpuGeneratorTensor() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor rng;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  return {"rng/cpu",
          rng,
          [rng] {
            at::Generator g = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> l(g.mutex());
            g.set_state(rng);
          },
          false,
          false,
          [rng]() mutable {
            at::Generator g = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> l(g.mutex());
            rng.copy_(g.get_state());
          }};
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
        out.push_back({prefix + "step", step, [s, step] { s->step(step[0].item<int64_t>()); }, false, false,
                       [s, step] { *step.data_ptr<int64_t>() = s->step(); }});
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
    out.push_back({"scaler", t, [scaler, t] { scaler->SetState(t); }, false, false,
                   [scaler, t]() mutable {
                     torch::NoGradGuard no_grad;
                     t.copy_(scaler->StateTensor());
                   }});
  }
  out.push_back(CpuGeneratorTensor());
  for (const auto& p : state.model->named_parameters(/*recurse=*/true)) out.push_back({"param/" + p.key(), p.value(), nullptr, true});
  for (const auto& b : state.model->named_buffers(/*recurse=*/true)) out.push_back({"buffer/" + b.key(), b.value(), nullptr});
  for (StateTensor& t : OptimizerStateTensors(*state.optimizer)) out.push_back(std::move(t));
  return out;
}

namespace {

// The module's own parameters and buffers, then its children's, by the objects themselves.
void IdentifyModule(const torch::nn::Module& m, std::vector<const void*>& out) {
  out.push_back(&m);
  for (const torch::Tensor& p : m.parameters(/*recurse=*/false)) out.push_back(p.unsafeGetTensorImpl());
  out.push_back(nullptr);  // parameters | buffers
  for (const torch::Tensor& b : m.buffers(/*recurse=*/false)) out.push_back(b.unsafeGetTensorImpl());
  for (const std::shared_ptr<torch::nn::Module>& c : m.children()) IdentifyModule(*c, out);
  out.push_back(nullptr);  // end of the module
}

// Each parameter, its state object and the state's tensors (undefined ones too: a momentum
// buffer or an amsgrad maximum that appears changes the listing).
void IdentifyOptimizer(torch::optim::Optimizer& opt, std::vector<const void*>& out) {
  const bool sgd = IsSgd(opt), adam = IsAdam(opt);
  out.push_back(&opt);
  for (const torch::optim::OptimizerParamGroup& group : opt.param_groups()) {
    out.push_back(nullptr);  // a group begins
    for (const torch::Tensor& p : group.params()) {
      out.push_back(p.unsafeGetTensorImpl());
      if (sgd) {
        auto* s = StateOf<torch::optim::SGDParamState>(opt, p);
        out.push_back(s);
        if (s) out.push_back(s->momentum_buffer().unsafeGetTensorImpl());
      } else if (adam) {
        auto* s = StateOf<torch::optim::AdamParamState>(opt, p);
        out.push_back(s);
        if (s) {
          out.push_back(s->exp_avg().unsafeGetTensorImpl());
          out.push_back(s->exp_avg_sq().unsafeGetTensorImpl());
          out.push_back(s->max_exp_avg_sq().unsafeGetTensorImpl());
        }
      }
    }
  }
}

// Every object and tensor a listing of `state` refers to, in a fixed order: equal while the
// listing holds.
void IdentifyState(const TrainState& state, std::vector<const void*>& out) {
  out.clear();
  out.push_back(state.progress);
  out.push_back(state.scaler);
  // On the host or on the device: the scaler's listed tensor is where its state was.
  if (state.scaler) out.push_back(state.scaler->scale_on_device().unsafeGetTensorImpl());
  IdentifyModule(*state.model, out);
  IdentifyOptimizer(*state.optimizer, out);
}

}  // namespace

const std::vector<StateTensor>& StateListing::Read(const TrainState& state) {
  IdentifyState(state, now_);
  if (listed_ > 0 && now_ == identity_) {
    for (StateTensor& t : tensors_) {
      if (t.reread) t.reread();
    }
    return tensors_;
  }
  tensors_ = StateTensors(state);
  identity_.swap(now_);
  ++listed_;
  return tensors_;
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
