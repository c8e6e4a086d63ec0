#include "worker/process_group.h"

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "worker/torch_compat.h"

#include <torch/cuda.h>
#if DTRUN_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#if DTRUN_WITH_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace dtrun::worker {
namespace {

c10::intrusive_ptr<c10d::Store> ConnectStore(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(env.master_port);
  opts.isServer = !env.use_agent_store && env.rank == 0;
  opts.numWorkers = env.world_size;
  opts.timeout = timeout;
#if DTRUN_TCPSTORE_HAS_LIBUV_OPTION
  opts.useLibUV = false;
#endif
  auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
  if (!env.use_agent_store) return tcp;
  // Matches torch.distributed's prefix, so C++ and Python workers can share one job.
  return c10::make_intrusive<c10d::PrefixStore>(
      "/worker/attempt_" + std::to_string(env.restart_count), tcp);
}

#if DTRUN_WITH_GLOO
c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> GlooOptions(std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifnames && *ifnames) {
    std::stringstream names(ifnames);
    for (std::string name; std::getline(names, name, ',');) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    }
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return options;
}
#endif

}  // namespace

bool CudaCollectivesAvailable() { return DTRUN_WITH_NCCL && torch::cuda::is_available(); }

ProcessGroupHandle InitProcessGroup(const DistEnv& env, std::chrono::milliseconds timeout, bool cuda) {
  ProcessGroupHandle h;
  h.store = ConnectStore(env, timeout);
#if DTRUN_WITH_NCCL
  if (cuda) {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    h.backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(h.store, env.rank, env.world_size, options);
    h.nccl = true;
    return h;
  }
#endif
  (void)cuda;
#if DTRUN_WITH_GLOO
  h.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(h.store, env.rank, env.world_size, GlooOptions(timeout));
  return h;
#else
  TORCH_CHECK(false, "CPU collectives need Gloo, and this build has none (its LibTorch ships no gloo headers, as pip "
              "wheels do not): run on CUDA tensors (NCCL), or build against a LibTorch with gloo headers");
#endif
}

c10::intrusive_ptr<c10d::Work> StartAllReduceMax(ProcessGroupHandle& pg, const torch::Tensor& t) {
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions max;
  max.reduceOp = c10d::ReduceOp::MAX;
  return pg.backend->allreduce(tensors, max);
}

}  // namespace dtrun::worker
