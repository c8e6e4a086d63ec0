// Process-group initialisation from the launcher's environment (torchrun's env:// contract):
// a TCPStore client (or server on rank 0 when the launcher hosts none) and a Gloo group.
// NCCL selection for CUDA tensors arrives with the training library (issue 4).
#pragma once

#include <chrono>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "worker/dist_env.h"

namespace dtrun::worker {

struct ProcessGroupHandle {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed per restart attempt, as torch does
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
};

// Connects to the job's store and builds a Gloo group. Honours GLOO_SOCKET_IFNAME as PyTorch's
// Python binding does. Throws c10::Error (from LibTorch) on failure; callers at the LibTorch
// boundary turn it into an exit code.
ProcessGroupHandle InitProcessGroup(const DistEnv& env,
                                    std::chrono::milliseconds timeout = std::chrono::minutes(30));

}  // namespace dtrun::worker
