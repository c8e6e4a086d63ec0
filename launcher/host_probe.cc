#include "launcher/host_probe.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "base/executable.h"
#include "base/host_name.h"
#include "launcher/network_interface.h"

namespace dtrun {
namespace {

// The names in a directory (none if it cannot be read), sorted.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The start of a small driver file ("" if unreadable): these are a few hundred bytes.
std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// The rest of the line after `key` ("GPU UUID:  GPU-…" -> "GPU-…"), trimmed; "" if absent.
std::string ValueAfter(const std::string& text, absl::string_view key) {
  size_t at = absl::string_view(text).find(key);
  if (at == std::string::npos) return "";
  size_t end = text.find('\n', at);
  return std::string(absl::StripAsciiWhitespace(
      absl::string_view(text).substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size())));
}

class RealHost final : public HostProbe {
 public:
  AcceleratorInventory Accelerators() const override {
    AcceleratorInventory inventory;
    // NVIDIA: a directory per GPU, named by its PCI address, its `information` file naming the UUID.
    for (const std::string& gpu : Entries("/proc/driver/nvidia/gpus")) {
      inventory.nvidia_uuids.push_back(ValueAfter(ReadSmall("/proc/driver/nvidia/gpus/" + gpu + "/information"),
                                                  "GPU UUID:"));
      inventory.nvidia_bus_ids.push_back(gpu);
      int node = -1;
      inventory.nvidia_numa_nodes.push_back(
          absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmall("/sys/bus/pci/devices/" + gpu + "/numa_node")), &node)
              ? node
              : -1);
    }
    // ROCm: the KFD topology's nodes with SIMDs are GPUs (CPU nodes have none).
    const std::string kfd = "/sys/class/kfd/kfd/topology/nodes/";
    for (const std::string& node : Entries(kfd)) {
      int simds = 0;
      inventory.amd_gpus += absl::SimpleAtoi(ValueAfter(ReadSmall(kfd + node + "/properties"), "simd_count"), &simds) &&
                            simds > 0;
    }
    // Intel GPUs (xpu): render nodes of vendor 0x8086.
    for (const std::string& card : Entries("/sys/class/drm")) {
      inventory.intel_gpus += absl::StartsWith(card, "renderD") &&
                              absl::StartsWith(ReadSmall("/sys/class/drm/" + card + "/device/vendor"), "0x8086");
    }
    return inventory;
  }
  int CpuCount() const override { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }
  CpuTopology Cpus() const override { return ReadCpuTopology("", AllowedCpus()); }
  absl::StatusOr<std::string> FindExecutable(const std::string& program) const override {
    return dtrun::FindExecutable(program);
  }
  bool Readable(const std::string& path) const override { return ::access(path.c_str(), R_OK) == 0; }
  std::optional<std::string> InterfaceWithAddress(const std::string& address) const override {
    return dtrun::InterfaceWithAddress(address);
  }
  std::optional<std::string> LocalAddressFacing(const std::string& host, int port) const override {
    return dtrun::LocalAddressFacing(host, port);
  }
  bool IsThisHost(const std::string& name) const override {
    const std::string self = LocalHostName();
    auto first_label = [](const std::string& n) { return n.substr(0, n.find('.')); };
    return name == self || (!name.empty() && first_label(name) == first_label(self)) ||
           dtrun::InterfaceWithAddress(name).has_value();
  }
  std::string ThisExecutable() const override {
    const std::string exe = RunningExecutable();
    return exe.empty() ? "dtrun" : exe;
  }
  std::string WorkingDirectory() const override {
    std::error_code ec;
    std::filesystem::path cwd = std::filesystem::current_path(ec);
    return ec ? "." : cwd.string();
  }
};

}  // namespace

const HostProbe& ThisHost() {
  static const RealHost host;
  return host;
}

}  // namespace dtrun
