// GPU numbers per worker process from NVML, the NVIDIA driver's management library, opened at run
// time (libnvidia-ml.so.1 comes with the driver; dtrun never links it). The one place dtrun speaks
// NVML. Without a driver every number stays unknown ("-" in `dtrun status`).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtrun::status {

struct GpuUsage {
  double util_percent = -1;  // of the device the process runs on, over NVML's last sample period
  int64_t mem_bytes = -1;    // what the process holds on it
};

class GpuProbe {
 public:
  // Null when NVML cannot be loaded or initialised (no driver, no GPU): the caller shows "-".
  // `library`: another NVML to load (a test's stand-in).
  static std::unique_ptr<GpuProbe> Open(const std::string& library = "libnvidia-ml.so.1");
  // Whether NVIDIA's kernel driver is loaded (/proc/driver/nvidia): without it Open() cannot
  // succeed, and a caller need not start a thread to find that out.
  static bool DriverLoaded();
  ~GpuProbe();
  // Usage of those of `pids` that hold a context on some GPU. A process seen on several GPUs is
  // reported on the one where it holds the most memory.
  std::map<pid_t, GpuUsage> Sample(const std::vector<pid_t>& pids);

  struct Api;

 private:
  explicit GpuProbe(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace dtrun::status
