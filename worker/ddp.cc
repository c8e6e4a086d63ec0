#include "worker/ddp.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

namespace dtrun::worker {

struct DistributedDataParallel::Bucket {
  torch::Tensor flat;
  std::vector<size_t> params;
  size_t ready = 0;
  c10::intrusive_ptr<c10d::Work> work;
};

namespace {

// Runs after AccumulateGrad has written param.grad(): the accumulated gradient is ready.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

void BroadcastFromRankZero(ProcessGroupHandle& pg, std::vector<torch::Tensor> tensors) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> flat{torch::cat([&] {
    std::vector<torch::Tensor> views;
    for (auto& t : tensors) views.push_back(t.detach().reshape(-1).to(torch::kFloat64));
    return views;
  }())};
  pg.backend->broadcast(flat)->wait();
  int64_t offset = 0;
  torch::NoGradGuard no_grad;
  for (auto& t : tensors) {
    t.copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()).to(t.dtype()));
    offset += t.numel();
  }
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroupHandle pg,
                                                 int world_size, DdpOptions options)
    : module_(std::move(module)),
      pg_(std::move(pg)),
      world_size_(world_size),
      options_(options),
      stopwatch_(!module_->parameters().empty() && module_->parameters().front().is_cuda()) {
  for (auto& p : module_->parameters()) {
    if (p.requires_grad()) params_.push_back(p);
  }
  BroadcastFromRankZero(pg_, module_->parameters());
  BroadcastFromRankZero(pg_, module_->buffers());
  // Buckets in reverse registration order: the order in which backward produces gradients.
  const int64_t cap = static_cast<int64_t>(options_.bucket_mb * 1024 * 1024 / sizeof(float));
  where_.resize(params_.size());
  std::vector<size_t> current;
  int64_t size = 0;
  auto close = [&] {
    if (current.empty()) return;
    auto b = std::make_unique<Bucket>();
    b->flat = torch::zeros({size}, params_[current[0]].options());
    int64_t offset = 0;
    for (size_t p : current) {
      where_[p] = {buckets_.size(), offset};
      offset += params_[p].numel();
    }
    b->params = current;
    buckets_.push_back(std::move(b));
    current.clear();
    size = 0;
  };
  for (size_t i = params_.size(); i-- > 0;) {
    current.push_back(i);
    size += params_[i].numel();
    if (size >= cap) close();
  }
  close();
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    acc->add_post_hook(std::make_unique<GradReadyHook>([this, i] { OnGradReady(i); }));
    accumulators_.push_back(std::move(acc));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::SyncBuffers() {
  if (!options_.broadcast_buffers || world_size_ == 1) return;
  CollectiveWatchdog::Scope guard(options_.watchdog, "the buffer broadcast");
  BroadcastFromRankZero(pg_, module_->buffers());
}

void DistributedDataParallel::OnGradReady(size_t param) {
  if (!sync_ || world_size_ == 1) return;
  auto [b, offset] = where_[param];
  Bucket& bucket = *buckets_[b];
  const torch::Tensor& grad = params_[param].grad();
  bucket.flat.narrow(0, offset, grad.numel()).copy_(grad.reshape(-1));
  if (++bucket.ready == bucket.params.size() && options_.overlap) LaunchFullInOrder();
}

void DistributedDataParallel::LaunchFullInOrder() {
  // In bucket order, never in the order they fill: backward may make the gradients in another
  // order on another rank (rank-dependent branches), and collectives pair by call order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->ready == buckets_[next_launch_]->params.size()) {
    Launch(*buckets_[next_launch_++]);
  }
}

void DistributedDataParallel::Launch(Bucket& bucket) {
  std::vector<torch::Tensor> tensors{bucket.flat};
  bucket.work = pg_.backend->allreduce(tensors);
}

void DistributedDataParallel::FinishGradientSync() {
  if (!sync_ || world_size_ == 1) return;
  torch::NoGradGuard no_grad;
  for (auto& b : buckets_) {
    if (!b->work) {
      // Parameters that got no gradient this step count as zero; or overlap is off.
      for (size_t p : b->params) {
        if (!params_[p].grad().defined()) {
          auto [bi, offset] = where_[p];
          b->flat.narrow(0, offset, params_[p].numel()).zero_();
        }
      }
      Launch(*b);
    }
  }
  CollectiveWatchdog::Scope guard(options_.watchdog, "the gradient all-reduce");
  // Backward is done and every bucket launched: from here on this rank waits for the others.
  stopwatch_.Start();
  for (auto& b : buckets_) {
    b->work->wait();  // Gloo: blocks until done; NCCL: orders the compute stream after it
    b->flat.div_(world_size_);
    for (size_t p : b->params) {
      auto [bi, offset] = where_[p];
      torch::Tensor& g = params_[p].mutable_grad();
      if (!g.defined()) g = torch::zeros_like(params_[p]);
      g.copy_(b->flat.narrow(0, offset, g.numel()).view(g.sizes()));
    }
    b->work.reset();
    b->ready = 0;
  }
  next_launch_ = 0;
  stopwatch_.Stop();
}

}  // namespace dtrun::worker
