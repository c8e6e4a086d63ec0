// `--nproc-per-node gpu|cuda|xpu|auto`: how many accelerators this job may use, as PyTorch in the
// workers will count them — the devices the machine has, narrowed by the visibility variables
// Slurm, Kubernetes' device plugins and users set (CUDA_VISIBLE_DEVICES, HIP_/ROCR_VISIBLE_DEVICES,
// ZE_AFFINITY_MASK) — with a line saying what was counted and from where. Pure functions over the
// facts a HostProbe reads, so every rule is unit-tested without the hardware.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "launcher/accelerator_inventory.h"

namespace dtrun {

enum class DeviceKind { kNvidia, kAmd, kIntel };

struct DeviceCount {
  int count = 0;
  std::string source;  // e.g. "CUDA_VISIBLE_DEVICES=0,3 of 8 NVIDIA GPUs in /proc/driver/nvidia/gpus"
};

// Which GPUs PyTorch's "cuda" devices are here: NVIDIA's, or AMD's under ROCm on a machine that has
// only those.
DeviceKind CudaDeviceKind(const AcceleratorInventory& inventory);

// The GPUs of `kind` (NVIDIA or AMD) the workers will see, given the environment they inherit, in
// the workers' numbering: each one's index in the inventory's list, -1 for one the driver's files
// cannot confirm (a MIG instance; an AMD GPU named by UUID). ROCm applies ROCR_VISIBLE_DEVICES, then
// HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES) to what that left.
struct VisibleGpus {
  std::vector<int> physical;
  std::string source;  // e.g. "CUDA_VISIBLE_DEVICES=0,3 of 8 NVIDIA GPUs in /proc/driver/nvidia/gpus"
};
VisibleGpus FindVisibleGpus(DeviceKind kind, const AcceleratorInventory& inventory,
                            const std::map<std::string, std::string>& env);

// The devices of `kind` the workers will see, given the environment they inherit.
DeviceCount CountVisibleDevices(DeviceKind kind, const AcceleratorInventory& inventory,
                                const std::map<std::string, std::string>& env);

// How many entries of a CUDA_VISIBLE_DEVICES-style list the runtime accepts out of `physical`
// devices: it reads indices or UUID prefixes up to the first entry that is invalid, out of range
// or repeated (as CUDA and PyTorch do), so "0,2,-1,1" is two devices and "-1" none.
int VisibleEntries(const std::string& list, const std::vector<std::string>& uuids);
// The physical index of each of those entries, in the list's order; -1 for one the driver's files
// cannot confirm (a MIG instance, or a UUID where no UUIDs are shown).
std::vector<int> VisibleIndices(const std::string& list, const std::vector<std::string>& uuids);

}  // namespace dtrun
