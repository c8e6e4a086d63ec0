#include "launcher/cpu_topology.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/kernel_file.h"

namespace dtrun {
namespace {

constexpr int kMaxCpuId = 65535;
// The lowest CPU of a list file, or `fallback` where it is missing or malformed.
int FirstOfList(const std::string& path, int fallback) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(ReadKernelFile(path));
  return cpus.ok() && !cpus->empty() ? cpus->front() : fallback;
}

int IntFile(const std::string& path, int fallback) {
  std::optional<int64_t> value = ReadKernelNumber(path);
  return value && *value >= INT_MIN && *value <= INT_MAX ? static_cast<int>(*value) : fallback;
}

// NUMA node of each CPU, from node*/cpulist (none on a kernel without NUMA).
std::map<int, int> NodeOfCpus(const std::string& root) {
  std::map<int, int> node_of;
  const std::string dir = root + "/sys/devices/system/node";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return node_of;
  while (dirent* e = ::readdir(d.get())) {
    int node = 0;
    if (!absl::StartsWith(e->d_name, "node") || !absl::SimpleAtoi(e->d_name + 4, &node) || node < 0) continue;
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(ReadKernelFile(absl::StrCat(dir, "/", e->d_name, "/cpulist")));
    if (!cpus.ok()) continue;
    for (int cpu : *cpus) node_of[cpu] = node;
  }
  return node_of;
}

// The L3 domain of a CPU: the cache index whose level is 3.
int L3Of(const std::string& cpu_dir) {
  for (int index = 0; index < 8; ++index) {
    const std::string cache = absl::StrCat(cpu_dir, "/cache/index", index);
    if (IntFile(cache + "/level", -1) == 3) return FirstOfList(cache + "/shared_cpu_list", -1);
  }
  return -1;
}

}  // namespace

CpuTopology ReadCpuTopology(const std::string& root, const std::vector<int>& allowed) {
  const std::map<int, int> node_of = NodeOfCpus(root);
  CpuTopology topology;
  for (int id : allowed) {
    const std::string dir = absl::StrCat(root, "/sys/devices/system/cpu/cpu", id);
    Cpu cpu;
    cpu.id = id;
    auto node = node_of.find(id);
    cpu.node = node == node_of.end() ? 0 : node->second;
    cpu.package = IntFile(dir + "/topology/physical_package_id", 0);
    cpu.core = FirstOfList(dir + "/topology/thread_siblings_list", id);
    cpu.l3 = L3Of(dir);
    topology.cpus.push_back(cpu);
  }
  std::sort(topology.cpus.begin(), topology.cpus.end(), [](const Cpu& a, const Cpu& b) { return a.id < b.id; });
  return topology;
}

std::vector<int> AllowedCpus() {
  std::vector<int> out;
  // Grown until the kernel's mask fits (EINVAL: the set is smaller than the kernel's).
  for (int size = 1024; size <= kMaxCpuId + 1; size *= 2) {
    cpu_set_t* set = CPU_ALLOC(size);
    if (set == nullptr) return out;
    const size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, set);
    const bool ok = ::sched_getaffinity(0, bytes, set) == 0;
    if (ok) {
      for (int cpu = 0; cpu < size; ++cpu) {
        if (CPU_ISSET_S(cpu, bytes, set)) out.push_back(cpu);
      }
    }
    CPU_FREE(set);
    if (ok || errno != EINVAL) break;
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(absl::StripAsciiWhitespace(text), ',', absl::SkipEmpty())) {
    const size_t dash = part.find('-');
    int first = 0;
    int last = 0;
    bool ok = absl::SimpleAtoi(part.substr(0, dash), &first);
    if (dash == absl::string_view::npos) {
      last = first;
    } else {
      ok = ok && absl::SimpleAtoi(part.substr(dash + 1), &last);
    }
    if (!ok || first < 0 || last < first || last > kMaxCpuId) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' is not a CPU or a range of CPUs (0-", kMaxCpuId, ")"));
    }
    if (cpus.size() + static_cast<size_t>(last - first) > kMaxCpuId) {
      return absl::InvalidArgumentError("more CPUs than a machine has");
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    absl::StrAppend(&out, out.empty() ? "" : ",", cpus[i]);
    if (j > i) absl::StrAppend(&out, "-", cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace dtrun
