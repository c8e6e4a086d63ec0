// A C++ LibTorch worker for dtrun: init from the environment, all_reduce, barrier.
//   allreduce_check [--backend gloo|nccl] [--mb N]
// Gloo reduces CPU tensors; NCCL reduces tensors on the local rank's GPU. Prints
// "ALLREDUCE_OK rank=R world=W sum=S backend=B" and exits 0 when the sum is right; with --mb it also
// times all_reduce of an N MiB float tensor and prints "ALLREDUCE_BW mb=N ms=T algbw_gbps=G".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <torch/torch.h>

#include "worker/process_group.h"

namespace {

struct Args {
  bool nccl = false;
  int64_t mb = 0;
};

bool ParseArgs(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--backend") && has_value) {
      const std::string b = argv[++i];
      if (b != "gloo" && b != "nccl") return false;
      a.nccl = b == "nccl";
    } else if (!std::strcmp(argv[i], "--mb") && has_value) {
      a.mb = std::strtoll(argv[++i], nullptr, 10);
      if (a.mb < 0 || a.mb > 65536) return false;
    } else {
      return false;
    }
  }
  return true;
}

// Mean wall time of `iters` all_reduces of an `mb` MiB tensor, after two untimed ones.
double TimeAllReduceMs(dtrun::worker::ProcessGroupHandle& pg, const torch::Device& device, int64_t mb) {
  std::vector<at::Tensor> t = {torch::ones({mb * (1 << 20) / 4}, torch::TensorOptions().device(device))};
  constexpr int kWarmup = 2, kIters = 10;
  for (int i = 0; i < kWarmup; ++i) pg.backend->allreduce(t)->wait();
  if (device.is_cuda()) torch::cuda::synchronize();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) pg.backend->allreduce(t)->wait();
  if (device.is_cuda()) torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kIters;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, args)) {
    std::fprintf(stderr, "usage: allreduce_check [--backend gloo|nccl] [--mb N (0..65536)]\n");
    return 2;
  }
  absl::StatusOr<dtrun::worker::DistEnv> read = dtrun::worker::ReadDistEnv();
  if (!read.ok()) {
    std::fprintf(stderr, "allreduce_check: %s\n", std::string(read.status().message()).c_str());
    return 2;
  }
  const dtrun::worker::DistEnv& env = *read;
  try {
    if (args.nccl && !dtrun::worker::CudaCollectivesAvailable()) {
      std::fprintf(stderr, "allreduce_check: --backend nccl needs a CUDA build of LibTorch and a visible GPU\n");
      return 2;
    }
    torch::Device device = torch::kCPU;
    if (args.nccl) device = torch::Device(torch::kCUDA, static_cast<int>(env.local_rank % torch::cuda::device_count()));
    dtrun::worker::ProcessGroupHandle pg =
        dtrun::worker::InitProcessGroup(env, std::chrono::minutes(5), /*cuda=*/args.nccl);
    std::vector<at::Tensor> tensors = {
        torch::full({4}, static_cast<float>(env.rank + 1), torch::TensorOptions().device(device))};
    pg.backend->allreduce(tensors)->wait();
    pg.backend->barrier()->wait();
    const double expected = env.world_size * (env.world_size + 1) / 2.0;
    const double got = tensors[0][0].item<double>();
    const bool ok = got == expected;
    std::printf("ALLREDUCE_%s rank=%d world=%d sum=%g backend=%s\n", ok ? "OK" : "BAD", env.rank, env.world_size, got,
                args.nccl ? "nccl" : "gloo");
    if (ok && args.mb > 0) {
      const double ms = TimeAllReduceMs(pg, device, args.mb);
      std::printf("ALLREDUCE_BW rank=%d mb=%lld ms=%.3f algbw_gbps=%.1f\n", env.rank, static_cast<long long>(args.mb),
                  ms, args.mb * 1.048576e6 / (ms * 1e6));
    }
    std::fflush(stdout);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_check: %s\n", e.what());
    return 3;
  }
}
