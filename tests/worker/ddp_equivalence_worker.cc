// Test worker (run under dtrun with N processes): DDP on different data per rank must leave the
// same parameters on every rank, equal (fp tolerance) to one process training on the union of
// the batches. Uses a model without batch norm. Prints DDP_EQUIVALENT or DDP_MISMATCH.
#include <cstdio>

#include <torch/torch.h>

#include "worker/ddp.h"

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() : a(register_module("a", torch::nn::Linear(8, 32))), b(register_module("b", torch::nn::Linear(32, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return b(torch::tanh(a(x))); }
  torch::nn::Linear a, b;
};
TORCH_MODULE(Net);

std::pair<torch::Tensor, torch::Tensor> Data(int rank, int step) {
  torch::manual_seed(1000 * step + rank);
  return {torch::randn({6, 8}), torch::randint(0, 4, {6})};
}

void Step(Net& net, torch::optim::SGD& opt, torch::Tensor x, torch::Tensor y,
          dtrun::worker::DistributedDataParallel* ddp) {
  opt.zero_grad();
  torch::nn::functional::cross_entropy(net->forward(x), y).backward();
  if (ddp) ddp->FinishGradientSync();
  opt.step();
}

}  // namespace

int main() {
  using namespace dtrun::worker;
  DistEnv env = ReadDistEnv();
  ProcessGroupHandle pg = InitProcessGroup(env);
  torch::manual_seed(env.rank + 7);  // different init per rank: DDP must broadcast rank 0's
  Net net;
  torch::manual_seed(7);
  Net reference;  // rank 0's init, trained alone on the union
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  DdpOptions d;
  d.bucket_mb = 0.0005;  // several buckets even for this small model
  DistributedDataParallel ddp(net.ptr(), pg, env.world_size, d);
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = Data(env.rank, step);
    Step(net, opt, x, y, &ddp);
    std::vector<torch::Tensor> xs, ys;
    for (int r = 0; r < env.world_size; ++r) {
      auto [xr, yr] = Data(r, step);
      xs.push_back(xr);
      ys.push_back(yr);
    }
    Step(reference, ref_opt, torch::cat(xs), torch::cat(ys), nullptr);
  }
  // Same on every rank: compare with rank 0's copy.
  double max_vs_reference = 0, max_vs_rank0 = 0;
  auto mine = net->parameters();
  auto ref = reference->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    max_vs_reference = std::max(max_vs_reference, (mine[i] - ref[i]).abs().max().item<double>());
    std::vector<torch::Tensor> t{mine[i].detach().clone()};
    pg.backend->broadcast(t)->wait();
    max_vs_rank0 = std::max(max_vs_rank0, (mine[i] - t[0]).abs().max().item<double>());
  }
  bool ok = max_vs_reference < 1e-5 && max_vs_rank0 == 0;
  std::printf("%s rank=%d max_vs_single_process=%.3g max_vs_rank0=%.3g\n", ok ? "DDP_EQUIVALENT" : "DDP_MISMATCH",
              env.rank, max_vs_reference, max_vs_rank0);
  return ok ? 0 : 1;
}
