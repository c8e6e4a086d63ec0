// A C++ LibTorch worker for dtrun: init from the environment, Gloo all_reduce, barrier.
// Prints "ALLREDUCE_OK rank=R world=W sum=S" and exits 0 when the sum is right.
#include <cstdio>
#include <exception>

#include <torch/torch.h>

#include "worker/process_group.h"

int main() {
  try {
    dtrun::worker::DistEnv env = dtrun::worker::ReadDistEnv();
    dtrun::worker::ProcessGroupHandle pg = dtrun::worker::InitProcessGroup(env);
    std::vector<at::Tensor> tensors = {torch::full({4}, static_cast<float>(env.rank + 1))};
    pg.backend->allreduce(tensors)->wait();
    pg.backend->barrier()->wait();
    const double expected = env.world_size * (env.world_size + 1) / 2.0;
    const double got = tensors[0][0].item<double>();
    const bool ok = got == expected;
    std::printf("ALLREDUCE_%s rank=%d world=%d sum=%g\n", ok ? "OK" : "BAD", env.rank,
                env.world_size, got);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_check: %s\n", e.what());
    return 3;
  }
}
