#include "status/nvml_probe.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include "base/shared_library.h"

namespace dtrun::status {
namespace {

// NVML's ABI, declared here for the few calls used (nvml.h is not in Debian's main archive).
using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr nvmlReturn_t kNvmlInsufficientSize = 7;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlProcessInfo_t {  // nvmlProcessInfo_v2_t, taken by the _v2 and _v3 process queries
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kNvmlValueNotAvailable = ~0ULL;
constexpr unsigned kMaxProcessesPerDevice = 4096;  // MPS allows 48 clients a GPU; this is far past it

}  // namespace

struct NvmlProbe::Api {
  explicit Api(SharedLibrary l) : lib(std::move(l)) {}
  SharedLibrary lib;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned*) = nullptr;
  nvmlReturn_t (*device_by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;
};

bool NvmlProbe::DriverLoaded() { return ::access("/proc/driver/nvidia/version", F_OK) == 0; }

std::unique_ptr<GpuProbe> NvmlProbe::Open(const std::string& library) {
  absl::StatusOr<SharedLibrary> lib = SharedLibrary::Open({library}, "the NVIDIA driver");
  if (!lib.ok()) return nullptr;
  auto api = std::make_unique<Api>(std::move(*lib));
  auto init = api->lib.Find<nvmlReturn_t (*)()>("nvmlInit_v2");
  api->shutdown = api->lib.Find<nvmlReturn_t (*)()>("nvmlShutdown");
  api->device_count = api->lib.Find<nvmlReturn_t (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  api->device_by_index = api->lib.Find<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
  api->utilization = api->lib.Find<nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*)>("nvmlDeviceGetUtilizationRates");
  using ProcessQuery = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*);
  api->processes = api->lib.Find<ProcessQuery>("nvmlDeviceGetComputeRunningProcesses_v3");
  if (!api->processes) api->processes = api->lib.Find<ProcessQuery>("nvmlDeviceGetComputeRunningProcesses_v2");
  if (!init || !api->shutdown || !api->device_count || !api->device_by_index || !api->utilization || !api->processes ||
      init() != kNvmlSuccess) {
    return nullptr;
  }
  return std::unique_ptr<GpuProbe>(new NvmlProbe(std::move(api)));
}

NvmlProbe::NvmlProbe(std::unique_ptr<Api> api) : api_(std::move(api)) {}

NvmlProbe::~NvmlProbe() { api_->shutdown(); }

std::map<pid_t, GpuUsage> NvmlProbe::Sample(const std::vector<pid_t>& pids) {
  std::map<pid_t, GpuUsage> out;
  const std::set<pid_t> wanted(pids.begin(), pids.end());
  unsigned count = 0;
  if (api_->device_count(&count) != kNvmlSuccess) return out;
  std::vector<nvmlProcessInfo_t> procs(64);
  for (unsigned i = 0; i < std::min(count, 64u); ++i) {
    nvmlDevice_t device = nullptr;
    if (api_->device_by_index(i, &device) != kNvmlSuccess) continue;
    unsigned n = static_cast<unsigned>(procs.size());
    nvmlReturn_t r = api_->processes(device, &n, procs.data());
    // Too small a buffer: NVML wrote nothing and says how many there are (fewer or more by now).
    if (r == kNvmlInsufficientSize && n <= kMaxProcessesPerDevice) {
      procs.resize(n + 8);
      n = static_cast<unsigned>(procs.size());
      r = api_->processes(device, &n, procs.data());
    }
    if (r != kNvmlSuccess) continue;
    nvmlUtilization_t util{};
    const bool has_util = api_->utilization(device, &util) == kNvmlSuccess;
    for (unsigned k = 0; k < std::min<size_t>(n, procs.size()); ++k) {
      const pid_t pid = static_cast<pid_t>(procs[k].pid);
      if (!wanted.count(pid)) continue;
      const int64_t mem =
          procs[k].usedGpuMemory == kNvmlValueNotAvailable ? -1 : static_cast<int64_t>(procs[k].usedGpuMemory);
      GpuUsage& u = out[pid];
      if (u.mem_bytes >= mem && u.util_percent >= 0) continue;
      u.mem_bytes = mem;
      u.util_percent = has_util ? static_cast<double>(util.gpu) : -1.0;  // not `: -1`, an unsigned 2^32-1
    }
  }
  return out;
}

}  // namespace dtrun::status
