#include "launcher/accelerator_inventory.h"

#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/untrusted_file.h"

namespace dtrun {
namespace {

constexpr size_t kMaxDriverFile = 64 << 10;  // these files are a few hundred bytes

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

std::string ReadDriverFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUntrustedFile(path, kMaxDriverFile);
  return text.ok() ? *std::move(text) : "";
}

// The value of the line that starts with `key` ("GPU UUID:  GPU-…" -> "GPU-…"), trimmed.
std::string LineValue(const std::string& text, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, key)) return std::string(absl::StripAsciiWhitespace(line.substr(key.size())));
  }
  return "";
}

int64_t LineNumber(const std::string& text, absl::string_view key, int64_t fallback) {
  int64_t value = 0;
  return absl::SimpleAtoi(LineValue(text, key), &value) ? value : fallback;
}

int NumaNodeOf(const std::string& root, const std::string& bus_id) {
  if (bus_id.empty()) return -1;
  int node = -1;
  return absl::SimpleAtoi(
             absl::StripAsciiWhitespace(ReadDriverFile(root + "/sys/bus/pci/devices/" + bus_id + "/numa_node")), &node)
             ? node
             : -1;
}

// NVIDIA: a directory per GPU named by its PCI address, its `information` naming the UUID.
std::vector<PciGpu> ReadNvidia(const std::string& root) {
  std::vector<PciGpu> gpus;
  const std::string dir = root + "/proc/driver/nvidia/gpus/";
  for (const std::string& bus_id : Entries(dir)) {
    gpus.push_back(PciGpu{LineValue(ReadDriverFile(dir + bus_id + "/information"), "GPU UUID:"), bus_id,
                          NumaNodeOf(root, bus_id)});
  }
  return gpus;
}

// ROCm: the KFD topology's nodes with SIMDs are GPUs (CPU nodes have none). `location_id` is the
// PCI bus and devfn (bus << 8 | device << 3 | function), `domain` the PCI domain.
std::vector<PciGpu> ReadAmd(const std::string& root) {
  const std::string dir = root + "/sys/class/kfd/kfd/topology/nodes/";
  std::vector<int> nodes;
  for (const std::string& name : Entries(dir)) {
    int node = 0;
    if (absl::SimpleAtoi(name, &node) && node >= 0) nodes.push_back(node);
  }
  std::sort(nodes.begin(), nodes.end());  // "10" after "9"
  std::vector<PciGpu> gpus;
  for (int node : nodes) {
    const std::string properties = ReadDriverFile(absl::StrFormat("%s%d/properties", dir, node));
    if (LineNumber(properties, "simd_count ", 0) <= 0) continue;
    const int64_t location = LineNumber(properties, "location_id ", -1);
    const int64_t domain = LineNumber(properties, "domain ", 0);
    PciGpu gpu;
    if (location >= 0 && location <= 0xffff && domain >= 0 && domain <= 0xffff) {
      gpu.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", domain, location >> 8, (location >> 3) & 0x1f, location & 7);
    }
    gpu.numa_node = NumaNodeOf(root, gpu.bus_id);
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

// Intel GPUs (xpu): render nodes of vendor 0x8086.
int CountIntel(const std::string& root) {
  int count = 0;
  const std::string dir = root + "/sys/class/drm/";
  for (const std::string& card : Entries(dir)) {
    count +=
        absl::StartsWith(card, "renderD") && absl::StartsWith(ReadDriverFile(dir + card + "/device/vendor"), "0x8086");
  }
  return count;
}

}  // namespace

AcceleratorInventory ReadAcceleratorInventory(const std::string& root) {
  return AcceleratorInventory{ReadNvidia(root), ReadAmd(root), CountIntel(root)};
}

}  // namespace dtrun
