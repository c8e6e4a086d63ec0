#include "launcher/host_probe.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "base/executable.h"
#include "base/host_name.h"
#include "launcher/network_interface.h"

namespace dtrun {
namespace {

class RealHost final : public HostProbe {
 public:
  AcceleratorInventory Accelerators() const override { return ReadAcceleratorInventory(""); }
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
