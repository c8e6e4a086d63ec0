// ROCm's GPUs as the amdgpu driver's KFD describes them in sysfs
// (/sys/class/kfd/kfd/topology/nodes/N): what the launcher places workers by (their PCI address)
// and what `dtrun status` reads their usage through (their KFD id and render node). Read without
// ROCm's libraries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrun {

// One GPU, or one partition of an MI300 (each is a device of its own to ROCm).
struct KfdGpu {
  int64_t gpu_id = -1;        // the KFD's id: names its files under /sys/class/kfd/kfd/proc/PID
  std::string bus_id;         // "0000:c3:00.0" ("" where the properties do not give it)
  int drm_render_minor = -1;  // /sys/class/drm/renderD<minor> (-1: not given)
};

// The topology's GPU nodes (those with SIMDs; CPU nodes have none) under `root` ("" for this
// machine), in node order, which is ROCm's device order. Missing or malformed files leave a GPU
// out, or a field at its default.
std::vector<KfdGpu> ReadKfdGpus(const std::string& root);

}  // namespace dtrun
