// Process-group initialisation from the launcher's environment (torchrun's env:// contract):
// a TCPStore client (or server on rank 0 when the launcher hosts none) and a collective backend:
// NCCL when the tensors live on CUDA (and LibTorch has it), Gloo otherwise.
#pragma once

#include <chrono>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "worker/dist_env.h"
#include "worker/torch_compat.h"

namespace dtrun::worker {

struct ProcessGroupHandle {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed per restart attempt, as torch does
  c10::intrusive_ptr<CollectiveBackend> backend;
  bool nccl = false;  // collectives take CUDA tensors
};

// Connects to the job's store and builds an NCCL group (`cuda`) or a Gloo group. Honours
// GLOO_SOCKET_IFNAME as PyTorch's Python binding does. Throws c10::Error (from LibTorch) on failure,
// also when this build has no backend for the request; callers at the LibTorch boundary turn it
// into an exit code.
ProcessGroupHandle InitProcessGroup(const DistEnv& env,
                                    std::chrono::milliseconds timeout = std::chrono::minutes(30),
                                    bool cuda = false);

// Starts an element-wise MAX all-reduce of `t` in place. The work's wait() blocks with Gloo; with
// NCCL it only orders the current stream after the all-reduce.
c10::intrusive_ptr<c10d::Work> StartAllReduceMax(ProcessGroupHandle& pg, const torch::Tensor& t);

// True if this build can run NCCL collectives on CUDA tensors and a GPU is visible.
bool CudaCollectivesAvailable();

}  // namespace dtrun::worker
