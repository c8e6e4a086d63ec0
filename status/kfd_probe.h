// AMD GPUs through the files the amdgpu driver's KFD keeps for each ROCm process
// (/sys/class/kfd/kfd/proc/PID/vram_<gpu_id>: bytes it holds on that GPU) and each device
// (/sys/class/drm/renderD<minor>/device/gpu_busy_percent): what rocm-smi reads, without ROCm's
// libraries, whose sonames and structures change from release to release.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/kfd_topology.h"
#include "status/gpu_probe.h"

namespace dtrun::status {

class KfdProbe final : public GpuProbe {
 public:
  // Null when `root` ("" for this machine) shows no KFD GPU.
  static std::unique_ptr<GpuProbe> Open(const std::string& root);
  std::map<pid_t, GpuUsage> Sample(const std::vector<pid_t>& pids) override;

 private:
  KfdProbe(std::string root, std::vector<KfdGpu> gpus) : root_(std::move(root)), gpus_(std::move(gpus)) {}
  std::string root_;
  std::vector<KfdGpu> gpus_;  // the topology does not change while the driver is loaded
};

}  // namespace dtrun::status
