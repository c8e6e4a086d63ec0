#include "launcher/accelerator_inventory.h"

#include <dirent.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "base/kernel_file.h"
#include "base/kfd_topology.h"

namespace dtrun {
namespace {

// The names in a directory (none if it cannot be read), sorted.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return out;
  while (dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] != '.') out.emplace_back(e->d_name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The value of the line that starts with `key` ("GPU UUID:  GPU-…" -> "GPU-…"), trimmed.
std::string LineValue(const std::string& text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, key)) return std::string(absl::StripAsciiWhitespace(line.substr(key.size())));
  }
  return "";
}

int NumaNodeOf(const std::string& root, const std::string& bus_id) {
  if (bus_id.empty()) return -1;
  std::optional<int64_t> node = ReadKernelNumber(root + "/sys/bus/pci/devices/" + bus_id + "/numa_node");
  return node && *node >= 0 && *node <= 65535 ? static_cast<int>(*node) : -1;
}

// NVIDIA: a directory per GPU named by its PCI address, its `information` naming the UUID.
std::vector<PciGpu> ReadNvidia(const std::string& root) {
  std::vector<PciGpu> gpus;
  const std::string dir = root + "/proc/driver/nvidia/gpus/";
  for (const std::string& bus_id : Entries(dir)) {
    gpus.push_back(PciGpu{LineValue(ReadKernelFile(dir + bus_id + "/information"), "GPU UUID:"), bus_id,
                          NumaNodeOf(root, bus_id)});
  }
  return gpus;
}

// ROCm: the KFD topology's GPU nodes (base/kfd_topology.h), in ROCm's order.
std::vector<PciGpu> ReadAmd(const std::string& root) {
  std::vector<PciGpu> gpus;
  for (const KfdGpu& kfd : ReadKfdGpus(root)) gpus.push_back(PciGpu{"", kfd.bus_id, NumaNodeOf(root, kfd.bus_id)});
  return gpus;
}

// Intel GPUs (xpu): render nodes of vendor 0x8086.
int CountIntel(const std::string& root) {
  int count = 0;
  const std::string dir = root + "/sys/class/drm/";
  for (const std::string& card : Entries(dir)) {
    count +=
        absl::StartsWith(card, "renderD") && absl::StartsWith(ReadKernelFile(dir + card + "/device/vendor"), "0x8086");
  }
  return count;
}

}  // namespace

AcceleratorInventory ReadAcceleratorInventory(const std::string& root) {
  return AcceleratorInventory{ReadNvidia(root), ReadAmd(root), CountIntel(root)};
}

}  // namespace dtrun
