// The accelerators this machine has, as their drivers show them in /proc and /sys, before any
// visibility variable narrows them (launcher/device_count.h does that). Read without loading CUDA,
// ROCm or Level Zero, so that dtrun starts in milliseconds and works where they are not installed.
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// One GPU, or one partition of an AMD GPU (each is a device of its own to ROCm).
struct PciGpu {
  std::string uuid;    // NVIDIA's "GPU-…" ("" where not readable; AMD GPUs: not read)
  std::string bus_id;  // "0000:3b:00.0" ("" where not readable)
  int numa_node = -1;  // -1: the kernel does not say
};

struct AcceleratorInventory {
  // In PCI order, as nvidia-smi numbers them (and CUDA, with CUDA_DEVICE_ORDER=PCI_BUS_ID).
  std::vector<PciGpu> nvidia;
  // In ROCm's order: the KFD topology's GPU nodes by node number.
  std::vector<PciGpu> amd;
  int intel_gpus = 0;  // Intel GPUs (xpu) with a render node
};

// Reads `root`/proc/driver/nvidia, `root`/sys/class/kfd and `root`/sys/class/drm ("" for this
// machine). A driver that is absent, or a file that is unreadable or malformed, leaves its GPUs out
// (or their field at its default): the counts say where they were read from.
AcceleratorInventory ReadAcceleratorInventory(const std::string& root);

}  // namespace dtrun
