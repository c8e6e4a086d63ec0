#include "status/gpu_probe.h"

#include <unistd.h>

#include "status/kfd_probe.h"
#include "status/nvml_probe.h"

namespace dtrun::status {

std::unique_ptr<GpuProbe> GpuProbe::Open() {
  if (NvmlProbe::DriverLoaded()) {
    if (std::unique_ptr<GpuProbe> nvml = NvmlProbe::Open()) return nvml;
  }
  return KfdProbe::Open("");
}

bool GpuProbe::DriverLoaded() {
  return NvmlProbe::DriverLoaded() || ::access("/sys/class/kfd/kfd/topology/nodes", F_OK) == 0;
}

}  // namespace dtrun::status
