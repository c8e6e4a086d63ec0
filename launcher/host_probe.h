// What the meaning of a command line depends on outside itself: this machine's GPUs and cores,
// the programs on PATH, its network interfaces and routes. Parsing asks through this interface and
// does no I/O of its own, so it is deterministic under test (FakeHost answers) and every lookup it
// makes is listed here.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "launcher/cpu_topology.h"
#include "launcher/device_count.h"

namespace dtrun {

class HostProbe {
 public:
  virtual ~HostProbe() = default;
  // The accelerators the drivers show, before any visibility variable (launcher/device_count.h).
  virtual AcceleratorInventory Accelerators() const = 0;
  virtual int CpuCount() const = 0;
  // The CPUs this process may run on, with their NUMA nodes, sockets, cores and caches.
  virtual CpuTopology Cpus() const = 0;
  // As execvp would find it (base/executable.h).
  virtual absl::StatusOr<std::string> FindExecutable(const std::string& program) const = 0;
  virtual bool Readable(const std::string& path) const = 0;
  // launcher/network_interface.h.
  virtual std::optional<std::string> InterfaceWithAddress(const std::string& address) const = 0;
  virtual std::optional<std::string> LocalAddressFacing(const std::string& host, int port) const = 0;
  // Whether `name` is this machine: its host name (or that name's first label, as a Kubernetes pod
  // is named before its service resolves), or a name or address of one of its interfaces.
  virtual bool IsThisHost(const std::string& name) const = 0;
  // This dtrun's path and the working directory: what `dtrun -H` runs on the other hosts.
  virtual std::string ThisExecutable() const = 0;
  virtual std::string WorkingDirectory() const = 0;
};

// The machine dtrun runs on.
const HostProbe& ThisHost();

}  // namespace dtrun
