#include "launcher/numa_binding.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace dtrun {
namespace {

absl::Status Impossible(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--numa-binding: ", why));
}

struct Home {
  int node;
  std::string where;
};

// Where each local rank belongs: its GPU's node, or an even share of the nodes without GPUs.
absl::StatusOr<std::vector<Home>> HomeNodes(int nproc, const std::set<int>& nodes, const std::vector<GpuSeat>& gpus) {
  std::vector<Home> home;
  const std::vector<int> node_list(nodes.begin(), nodes.end());
  if (gpus.empty()) {
    for (int r = 0; r < nproc; ++r) {
      const int node = node_list[static_cast<size_t>(r) * node_list.size() / static_cast<size_t>(nproc)];
      home.push_back({node, absl::StrCat("NUMA node ", node, ", no GPU")});
    }
    return home;
  }
  if (nproc > static_cast<int>(gpus.size())) {
    return Impossible(
        absl::StrCat(nproc, " workers but ", gpus.size(), " visible GPU", gpus.size() == 1 ? "" : "s",
                     "; the binding follows each worker's GPU: one worker per GPU (--nproc-per-node gpu), "
                     "or CUDA_VISIBLE_DEVICES= for a job that uses no GPU"));
  }
  for (int r = 0; r < nproc; ++r) {
    const GpuSeat& gpu = gpus[static_cast<size_t>(r)];
    int node = gpu.numa_node;
    if (node < 0 && nodes.size() == 1) node = *nodes.begin();  // one node: no NUMA to speak of
    if (node < 0) {
      return Impossible(absl::StrCat("the kernel does not say which NUMA node GPU ", gpu.bus_id,
                                     " is on (/sys/bus/pci/devices/", gpu.bus_id,
                                     "/numa_node is -1); bind inside PROGRAM (numactl) instead"));
    }
    if (!nodes.count(node)) {
      return Impossible(absl::StrCat("GPU ", gpu.bus_id, " is on NUMA node ", node,
                                     ", where this process may run on no CPU (see its affinity: taskset -p, "
                                     "Slurm's --cpu-bind); widen it or leave --numa-binding out"));
    }
    home.push_back({node, absl::StrCat("NUMA node ", node, ", GPU ", gpu.bus_id)});
  }
  return home;
}

std::vector<int> CpusWhere(const CpuTopology& t, const std::function<bool(const Cpu&)>& keep) {
  std::vector<int> out;
  for (const Cpu& cpu : t.cpus) {
    if (keep(cpu)) out.push_back(cpu.id);
  }
  return out;
}

// The node's physical cores cut into as many contiguous shares as workers live there.
absl::Status ShareCores(const CpuTopology& t, int node, const std::vector<int>& ranks, std::vector<WorkerCpus>& plan) {
  std::vector<int> cores;
  for (const Cpu& cpu : t.cpus) {
    if (cpu.node == node) cores.push_back(cpu.core);
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  const size_t k = ranks.size();
  if (cores.size() < k) {
    return absl::InvalidArgumentError(absl::StrCat("--numa-binding exclusive: NUMA node ", node, " has ", cores.size(),
                                                   " physical core", cores.size() == 1 ? "" : "s", " for ", k,
                                                   " workers; use --numa-binding node"));
  }
  for (size_t i = 0; i < k; ++i) {
    const std::set<int> mine(cores.begin() + static_cast<long>(i * cores.size() / k),
                             cores.begin() + static_cast<long>((i + 1) * cores.size() / k));
    plan[static_cast<size_t>(ranks[i])].cpus = CpusWhere(t, [&](const Cpu& c) { return mine.count(c.core) > 0; });
  }
  return absl::OkStatus();
}

// The node's L3 domains dealt out to its workers in turn (a domain is shared once all have one).
void DealCacheDomains(const CpuTopology& t, int node, const std::vector<int>& ranks, std::vector<WorkerCpus>& plan) {
  std::set<int> domains;
  for (const Cpu& cpu : t.cpus) {
    if (cpu.node == node) domains.insert(cpu.l3);
  }
  const std::vector<int> list(domains.begin(), domains.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int l3 = list[i % list.size()];
    WorkerCpus& w = plan[static_cast<size_t>(ranks[i])];
    // Where the kernel describes no L3 (-1), the node's CPUs are one domain.
    w.cpus = CpusWhere(t, [&](const Cpu& c) { return c.node == node && c.l3 == l3; });
    if (l3 >= 0) absl::StrAppend(&w.where, ", L3 of CPU ", l3);
  }
}

}  // namespace

absl::StatusOr<NumaMode> ParseNumaMode(absl::string_view value) {
  const std::string v = absl::AsciiStrToLower(value);
  if (v == "node") return NumaMode::kNode;
  if (v == "socket") return NumaMode::kSocket;
  if (v == "exclusive") return NumaMode::kExclusive;
  if (v == "core-complex" || v == "core_complex") return NumaMode::kCoreComplex;
  return absl::InvalidArgumentError(
      absl::StrCat("--numa-binding ", value, ": expected node, socket, exclusive or core-complex"));
}

absl::StatusOr<std::vector<WorkerCpus>> PlanNumaBinding(NumaMode mode, int nproc, const CpuTopology& topology,
                                                        const std::vector<GpuSeat>& gpus) {
  std::set<int> nodes;
  for (const Cpu& cpu : topology.cpus) nodes.insert(cpu.node);
  if (nodes.empty()) return Impossible("this process may run on no CPU the kernel describes");
  if (nproc < 1) return Impossible("no workers to bind");
  absl::StatusOr<std::vector<Home>> home = HomeNodes(nproc, nodes, gpus);
  if (!home.ok()) return home.status();
  std::vector<WorkerCpus> plan(static_cast<size_t>(nproc));
  std::map<int, std::vector<int>> ranks_on;  // node -> its local ranks, in order
  for (int r = 0; r < nproc; ++r) {
    const int node = (*home)[static_cast<size_t>(r)].node;
    plan[static_cast<size_t>(r)].where = (*home)[static_cast<size_t>(r)].where;
    ranks_on[node].push_back(r);
  }
  for (const auto& entry : ranks_on) {
    const int node = entry.first;  // not a structured binding: lambdas capture it (C++17)
    const std::vector<int>& ranks = entry.second;
    switch (mode) {
      case NumaMode::kNode:
      case NumaMode::kSocket: {
        // Every worker of the node gets the same CPUs: the node's, or its sockets'.
        std::set<int> packages;
        for (const Cpu& cpu : topology.cpus) {
          if (cpu.node == node) packages.insert(cpu.package);
        }
        const std::vector<int> shared = CpusWhere(topology, [&](const Cpu& c) {
          return mode == NumaMode::kNode ? c.node == node : packages.count(c.package) > 0;
        });
        for (int r : ranks) plan[static_cast<size_t>(r)].cpus = shared;
        break;
      }
      case NumaMode::kExclusive:
        if (absl::Status s = ShareCores(topology, node, ranks, plan); !s.ok()) return s;
        break;
      case NumaMode::kCoreComplex:
        DealCacheDomains(topology, node, ranks, plan);
        break;
    }
  }
  return plan;
}

}  // namespace dtrun
