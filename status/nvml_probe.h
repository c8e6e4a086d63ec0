// NVIDIA GPUs through NVML, the driver's management library, opened at run time
// (libnvidia-ml.so.1 comes with the driver; dtrun never links it). The one place dtrun speaks NVML.
#pragma once

#include <memory>
#include <string>

#include "status/gpu_probe.h"

namespace dtrun::status {

class NvmlProbe final : public GpuProbe {
 public:
  // Null when NVML cannot be loaded or initialised (no driver, no GPU). `library`: another NVML to
  // load (a test's stand-in).
  static std::unique_ptr<GpuProbe> Open(const std::string& library = "libnvidia-ml.so.1");
  // Whether NVIDIA's kernel driver is loaded (/proc/driver/nvidia).
  static bool DriverLoaded();
  ~NvmlProbe() override;
  std::map<pid_t, GpuUsage> Sample(const std::vector<pid_t>& pids) override;

  struct Api;

 private:
  explicit NvmlProbe(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
};

}  // namespace dtrun::status
