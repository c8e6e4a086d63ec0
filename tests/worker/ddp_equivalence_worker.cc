// Test worker (run under dtrun with N processes): DDP on different data per rank must leave the
// same parameters on every rank, equal (fp tolerance) to one process training on the union of
// the batches. Checked twice: a model without batch norm (prints DDP_EQUIVALENT or
// DDP_MISMATCH), and a ResNet-18 with SyncBatchNorm (SYNC_BN_EQUIVALENT or SYNC_BN_MISMATCH; the
// same ResNet with per-process batch norm must differ from the union run, or the check proves
// nothing: SYNC_BN_CHECK_BLIND).
#include <cstdio>

#include <torch/torch.h>

#include "worker/ddp.h"
#include "worker/resnet.h"
#include "worker/sync_batch_norm.h"

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

// Largest difference between two modules' parameters and buffers.
double MaxDifference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  auto ba = a.buffers(), bb = b.buffers();
  pa.insert(pa.end(), ba.begin(), ba.end());
  pb.insert(pb.end(), bb.begin(), bb.end());
  for (size_t i = 0; i < pa.size(); ++i) {
    worst = std::max(worst, (pa[i].to(torch::kFloat64) - pb[i].to(torch::kFloat64)).abs().max().item<double>());
  }
  return worst;
}

// ResNet-18 trained for two steps on 4 images per rank, with or without SyncBatchNorm; returns
// its largest difference from one process trained on the union of the ranks' images.
double ResNetDifferenceFromUnion(dtrun::worker::ProcessGroupHandle& pg, const dtrun::worker::DistEnv& env,
                                 bool sync_bn) {
  using namespace dtrun::worker;
  ResNetOptions o;
  o.num_classes = 10;
  torch::manual_seed(3);
  ResNet net(o), reference(o);
  torch::NoGradGuard no_grad_copy;
  for (size_t i = 0; i < net->parameters().size(); ++i) reference->parameters()[i].copy_(net->parameters()[i]);
  if (sync_bn) net->SetBatchNormSync(std::make_shared<BatchNormSync>(pg));
  auto batch = [](int rank, int step) {
    torch::manual_seed(100 * step + rank);
    return std::make_pair(torch::randn({4, 3, 32, 32}), torch::randint(0, 10, {4}));
  };
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  DdpOptions d;
  d.broadcast_buffers = false;  // with SyncBatchNorm the running statistics agree by themselves
  DistributedDataParallel ddp(net.ptr(), pg, env.world_size, d);
  // Two steps: from the third on, training amplifies float32 rounding (1e-5 after two steps, 1e-3
  // after three on an AVX2 CPU), which says nothing of the equivalence.
  for (int step = 0; step < 2; ++step) {
    torch::AutoGradMode grad_on(true);
    auto [x, y] = batch(env.rank, step);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    ddp.FinishGradientSync();
    opt.step();
    std::vector<torch::Tensor> xs, ys;
    for (int r = 0; r < env.world_size; ++r) {
      auto [xr, yr] = batch(r, step);
      xs.push_back(xr);
      ys.push_back(yr);
    }
    ref_opt.zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(torch::cat(xs)), torch::cat(ys)).backward();
    ref_opt.step();
  }
  return MaxDifference(*net, *reference);
}

}  // namespace

int main() {
  using namespace dtrun::worker;
  absl::StatusOr<DistEnv> read = ReadDistEnv();
  if (!read.ok()) {
    std::fprintf(stderr, "ddp_equivalence_worker: %s\n", std::string(read.status().message()).c_str());
    return 2;
  }
  const DistEnv& env = *read;
  ProcessGroupHandle pg = InitProcessGroup(env);
  const double with_sync = ResNetDifferenceFromUnion(pg, env, /*sync_bn=*/true);
  const double without_sync = ResNetDifferenceFromUnion(pg, env, /*sync_bn=*/false);
  const char* verdict = without_sync < 1e-3 ? "SYNC_BN_CHECK_BLIND" : with_sync < 1e-4 ? "SYNC_BN_EQUIVALENT" : "SYNC_BN_MISMATCH";
  std::printf("%s rank=%d max_vs_single_process=%.3g (per-process batch norm: %.3g)\n", verdict, env.rank, with_sync,
              without_sync);
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
  bool ok = max_vs_reference < 1e-5 && max_vs_rank0 == 0 && verdict == std::string("SYNC_BN_EQUIVALENT");
  std::printf("%s rank=%d max_vs_single_process=%.3g max_vs_rank0=%.3g\n", ok ? "DDP_EQUIVALENT" : "DDP_MISMATCH",
              env.rank, max_vs_reference, max_vs_rank0);
  return ok ? 0 : 1;
}
