// libFuzzer: dtrun's command line, the one input every user types (and a scheduler's template
// fills in): flag values, `--rdzv-conf` pairs, stream and rank specs, prefix templates, filters,
// NUMA modes, with PET_*/Slurm/visibility variables beside them. Any tokens: parsing never crashes
// or throws, and a command line it accepts describes a job that can be started.
//
// Input: one token per line; a line starting with "=" is an environment entry ("=NAME=VALUE")
// instead of an argument.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "launcher/launch_config.h"

namespace {

// A fixed machine: 8 CPUs on 2 NUMA nodes, 4 NVIDIA GPUs (2 a node), every program on PATH except
// those named "missing*"; parsing asks it and nothing else.
class FuzzHost final : public dtrun::HostProbe {
 public:
  FuzzHost() {
    for (int id = 0; id < 8; ++id) topology_.cpus.push_back(dtrun::Cpu{id, id / 4, id / 4, id, id / 4 * 4});
    const char* bus[] = {"0000:1b:00.0", "0000:3b:00.0", "0000:9b:00.0", "0000:bb:00.0"};
    for (int g = 0; g < 4; ++g)
      inventory_.nvidia.push_back(dtrun::PciGpu{"GPU-" + std::to_string(g) + "a", bus[g], g / 2});
  }
  dtrun::AcceleratorInventory Accelerators() const override { return inventory_; }
  int CpuCount() const override { return 8; }
  dtrun::CpuTopology Cpus() const override { return topology_; }
  absl::StatusOr<std::string> FindExecutable(const std::string& program) const override {
    if (program.empty() || program.rfind("missing", 0) == 0) return absl::NotFoundError(program + ": not found");
    return program[0] == '/' ? program : "/usr/bin/" + program;
  }
  bool Readable(const std::string& path) const override { return path.find("unreadable") == std::string::npos; }
  std::optional<std::string> InterfaceWithAddress(const std::string& address) const override {
    if (address == "10.0.0.1") return std::string("eth0");
    return std::nullopt;
  }
  std::optional<std::string> LocalAddressFacing(const std::string&, int) const override { return "10.0.0.1"; }
  bool IsThisHost(const std::string& name) const override { return name == "node0" || name == "10.0.0.1"; }
  std::string ThisExecutable() const override { return "/usr/bin/dtrun"; }
  std::string WorkingDirectory() const override { return "/home/user/job"; }

 private:
  dtrun::AcceleratorInventory inventory_;
  dtrun::CpuTopology topology_;
};

void CheckConfig(const dtrun::LaunchConfig& c) {
  const dtrun::AgentOptions& a = c.agent;
  if (a.nproc_per_node < 1) __builtin_trap();
  if (c.min_nodes < 1 || c.min_nodes > c.max_nodes) __builtin_trap();
  if (a.executable.empty() || a.argv.empty()) __builtin_trap();
  if (!a.worker_cpus.empty() && a.worker_cpus.size() != static_cast<size_t>(a.nproc_per_node)) __builtin_trap();
  for (const std::vector<int>& cpus : a.worker_cpus) {
    if (cpus.empty()) __builtin_trap();
    for (int cpu : cpus) {
      if (cpu < 0 || cpu >= 8) __builtin_trap();
    }
  }
  if (c.multi_node() && (c.service_host.empty() || c.service_port <= 0 || c.service_port > 65535)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const FuzzHost host;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  for (absl::string_view line : absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data), size), '\n')) {
    if (!line.empty() && line[0] == '=') {
      std::pair<std::string, std::string> kv = absl::StrSplit(line.substr(1), absl::MaxSplits('=', 1));
      env[kv.first] = kv.second;
    } else {
      args.emplace_back(line);
    }
  }
  if (args.size() > 64) return 0;  // a command line, not a file
  absl::StatusOr<dtrun::ParsedCommandLine> parsed = dtrun::ParseCommandLine(args, env, host);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) __builtin_trap();  // an error says what was wrong
    return 0;
  }
  if (parsed->config) CheckConfig(*parsed->config);
  if (!parsed->config && !parsed->ssh_launch && parsed->exit_text.empty()) __builtin_trap();
  return 0;
}
