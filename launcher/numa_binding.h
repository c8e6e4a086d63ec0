// `--numa-binding`: which CPUs each worker of this node runs on, so that a worker and its threads
// stay on the NUMA node of its GPU (local rank r uses the r-th visible GPU, as PyTorch's workers
// do) and read memory that node owns. torchrun 2.9's modes, decided here from the topology alone
// (a pure function, unit-tested with made-up machines) and applied by the agent with
// sched_setaffinity before the worker's exec: nothing is wrapped in numactl.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/cpu_topology.h"

namespace dtrun {

enum class NumaMode {
  kNode,         // every CPU of the GPU's NUMA node
  kSocket,       // every CPU of the GPU's socket (all its NUMA nodes)
  kExclusive,    // the node's physical cores shared out among the workers there, none shared
  kCoreComplex,  // one L3 cache domain of the node per worker (domains reused when fewer)
};

// "node", "socket", "exclusive" or "core-complex" (torchrun's spellings, "core_complex" too).
absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view value);

// A visible GPU, in the order the workers' CUDA numbers them.
struct GpuSeat {
  std::string bus_id;  // "0000:3b:00.0"
  int numa_node = -1;  // -1: the kernel does not say
};

struct WorkerCpus {
  std::vector<int> cpus;  // sorted
  std::string where;      // "NUMA node 1, GPU 0000:b1:00.0"
};

// One entry per local rank. Without GPUs the workers are spread over the NUMA nodes in order
// (ranks 0..k-1 on the first node, and so on): a CPU job gets the same locality. Errors name the
// node, GPU or count that makes the mode impossible, and what to use instead.
absl::StatusOr<std::vector<WorkerCpus>> PlanNumaBinding(NumaMode mode, int nproc, const CpuTopology& topology,
                                                        const std::vector<GpuSeat>& gpus);

}  // namespace dtrun
