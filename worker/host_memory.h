// Host (CPU) memory policy for training processes.
#pragma once

namespace dtrun::worker {

// Makes glibc malloc keep freed memory in the process instead of returning it to the kernel.
// A CPU training step allocates and frees the same large activation tensors every step; most are
// above glibc's 32 MiB mmap ceiling, so by default each one is mapped, page-faulted in 4 KiB at a
// time and unmapped again — about 15% of a ResNet-18 step on CPU (docs/BENCHMARKS.md). Keeping
// the pages costs a higher steady RSS (~+30% for ResNet-18, batch 32), the same trade CUDA's
// caching allocator makes. Returns false where the C library has no such knobs (non-glibc).
bool RetainFreedHostMemory();

}  // namespace dtrun::worker
