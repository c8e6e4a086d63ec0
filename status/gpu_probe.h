// GPU numbers per worker process for `dtrun status`: NVIDIA's from NVML (status/nvml_probe.h),
// AMD's from the KFD's files (status/kfd_probe.h). Without either driver every number stays
// unknown ("-").
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <vector>

namespace dtrun::status {

struct GpuUsage {
  double util_percent = -1;  // of the device the process runs on, over the driver's last period
  int64_t mem_bytes = -1;    // what the process holds on it
};

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // This machine's: NVML where NVIDIA's driver is loaded, else the KFD's files where ROCm's is;
  // null when neither answers (the caller shows "-").
  static std::unique_ptr<GpuProbe> Open();
  // Whether a GPU driver is loaded: without one Open() cannot succeed, and a caller need not
  // start a thread to find that out.
  static bool DriverLoaded();
  // Usage of those of `pids` that hold memory on some GPU. A process seen on several GPUs is
  // reported on the one where it holds the most.
  virtual std::map<pid_t, GpuUsage> Sample(const std::vector<pid_t>& pids) = 0;
};

}  // namespace dtrun::status
