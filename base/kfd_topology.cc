#include "base/kfd_topology.h"

#include <dirent.h>

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/kernel_file.h"

namespace dtrun {
namespace {

std::vector<int> NodeNumbers(const std::string& dir) {
  std::vector<int> nodes;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return nodes;
  while (dirent* e = ::readdir(d.get())) {
    int node = 0;
    if (absl::SimpleAtoi(e->d_name, &node) && node >= 0) nodes.push_back(node);
  }
  std::sort(nodes.begin(), nodes.end());  // numeric: "10" after "9"
  return nodes;
}

// `location_id` is the PCI bus and devfn (bus << 8 | device << 3 | function), `domain` the domain.
std::string BusId(int64_t domain, int64_t location) {
  if (location < 0 || location > 0xffff || domain < 0 || domain > 0xffff) return "";
  return absl::StrFormat("%04x:%02x:%02x.%x", domain, location >> 8, (location >> 3) & 0x1f, location & 7);
}

// The value of the line `key VALUE` in a KFD properties file, or `fallback`.
int64_t KfdProperty(const std::string& text, const std::string& key, int64_t fallback) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    int64_t value = 0;
    if (kv.first == key && absl::SimpleAtoi(absl::StripAsciiWhitespace(kv.second), &value)) return value;
  }
  return fallback;
}

}  // namespace

std::vector<KfdGpu> ReadKfdGpus(const std::string& root) {
  const std::string dir = root + "/sys/class/kfd/kfd/topology/nodes/";
  std::vector<KfdGpu> gpus;
  for (int node : NodeNumbers(dir)) {
    const std::string properties = ReadKernelFile(absl::StrCat(dir, node, "/properties"));
    if (KfdProperty(properties, "simd_count", 0) <= 0) continue;
    KfdGpu gpu;
    gpu.gpu_id = ReadKernelNumber(absl::StrCat(dir, node, "/gpu_id")).value_or(-1);
    gpu.bus_id = BusId(KfdProperty(properties, "domain", 0), KfdProperty(properties, "location_id", -1));
    const int64_t minor = KfdProperty(properties, "drm_render_minor", -1);
    gpu.drm_render_minor = minor >= 0 && minor < (1 << 20) ? static_cast<int>(minor) : -1;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

}  // namespace dtrun
