// This machine's CPUs as the kernel describes them in sysfs: the NUMA node, socket, physical core
// and L3 cache of each CPU dtrun may run on (its affinity mask: Slurm's, a container's, taskset's).
// What `--numa-binding` places workers on (launcher/numa_binding.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

struct Cpu {
  int id = 0;
  int node = 0;     // NUMA node (0 where the kernel has no NUMA)
  int package = 0;  // socket
  int core = 0;     // physical core: the lowest CPU id among its hardware threads
  int l3 = -1;      // L3 cache domain: the lowest CPU id sharing it (-1: not described)
};

struct CpuTopology {
  std::vector<Cpu> cpus;  // the CPUs this process may use, by id
};

// Reads `root`/sys/devices/system/{cpu,node} ("" for this machine) for the CPUs in `allowed`.
// Files that are missing or unreadable leave their default (one node, one socket, no L3).
CpuTopology ReadCpuTopology(const std::string& root, const std::vector<int>& allowed);

// The CPUs this process may run on (sched_getaffinity).
std::vector<int> AllowedCpus();

// The kernel's CPU list format, "0-3,8-11" (ids below 65,536). Errors name the bad part.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);
// Sorted ids back in that format: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

}  // namespace dtrun
