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

// In 1.x ProcessGroupGloo derives from ProcessGroup; in 2.x from Backend. Both expose the
// collectives the worker library uses (allreduce, broadcast, barrier), so callers hold the
// concrete class.

#if defined(USE_C10D_NCCL)
#define DTRUN_HAVE_NCCL 1
#else
#define DTRUN_HAVE_NCCL 0
#endif
