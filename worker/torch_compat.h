// The one place for LibTorch-version and CUDA differences in the worker library.
#pragma once

#include <torch/version.h>

// LibTorch >= 2.2 has TCPStoreOptions::useLibUV, defaulting to true from 2.4; Debian's builds have
// no libuv, so stores must ask for the classic backend.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
#define DTRUN_TCPSTORE_HAS_LIBUV_OPTION 1
#else
#define DTRUN_TCPSTORE_HAS_LIBUV_OPTION 0
#endif

// NCCL: CMake defines DTRUN_WITH_NCCL (and USE_C10D_NCCL, which ProcessGroupNCCL.hpp needs) when
// LibTorch was built with CUDA.
#ifndef DTRUN_WITH_NCCL
#define DTRUN_WITH_NCCL 0
#endif

// The step on the GPU without host syncs (worker/device_step.h) needs fused SGD that takes the
// learning rate and the overflow flag as tensors on the device (LibTorch 2.4+, CUDA builds).
#if DTRUN_WITH_NCCL && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))
#define DTRUN_HAS_DEVICE_STEP 1
#else
#define DTRUN_HAS_DEVICE_STEP 0
#endif

// Gloo: CMake defines DTRUN_WITH_GLOO when gloo's headers are there (Debian's LibTorch has them,
// pip wheels do not); without it only NCCL collectives exist.
#ifndef DTRUN_WITH_GLOO
#define DTRUN_WITH_GLOO 0
#endif

// In 1.x the collective classes (ProcessGroupGloo, ProcessGroupNCCL) derive from ProcessGroup; in
// 2.x from Backend. Both expose allreduce / broadcast / barrier, which is all the library uses.
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
namespace dtrun::worker {
using CollectiveBackend = c10d::Backend;
}
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
namespace dtrun::worker {
using CollectiveBackend = c10d::ProcessGroup;
}
#endif

#include <ATen/autocast_mode.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "base/hex_address.h"

namespace dtrun::worker {

// Turns autocast on or off for CPU or CUDA with the given lower-precision dtype. LibTorch 2.4+
// takes the device type; older versions have one function per device.
inline void SetAutocast(bool cuda, at::ScalarType dtype, bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  const at::DeviceType device = cuda ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (cuda) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
#endif
  if (!enabled) at::autocast::clear_cache();
}

// The optimizer's state key for `p`: LibTorch 1.x keys by the TensorImpl address printed as a
// string (as an ostream prints a pointer: "0x" and lowercase hex), 2.x by the address itself.
// Written out by hand: an ostringstream per parameter was ~1 us, paid for every parameter of every
// SGD step and every arming of a snapshot (a test compares the two).
template <class Map>
typename Map::key_type OptimizerStateKey(const Map&, const at::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    char text[kHexAddressChars];
    return std::string(text, FormatHexAddress(reinterpret_cast<uintptr_t>(p.unsafeGetTensorImpl()), text));
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

// Autocast for one scope (the forward pass and the loss).
class AutocastScope {
 public:
  AutocastScope(bool enabled, bool cuda, at::ScalarType dtype) : enabled_(enabled), cuda_(cuda), dtype_(dtype) {
    if (enabled_) SetAutocast(cuda_, dtype_, true);
  }
  ~AutocastScope() {
    if (enabled_) SetAutocast(cuda_, dtype_, false);
  }

 private:
  bool enabled_, cuda_;
  at::ScalarType dtype_;
};

}  // namespace dtrun::worker
