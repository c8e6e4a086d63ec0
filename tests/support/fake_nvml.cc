// A stand-in for libnvidia-ml.so.1 with the few calls dtrun makes (status/gpu_probe.cc), so the
// probe's logic runs on a machine without NVIDIA's driver. Its GPUs come from FAKE_NVML_GPUS, read
// by nvmlInit_v2: GPUs separated by ';', each "UTIL:PID=MEM,PID=MEM" ("-" for a utilisation NVML
// cannot give, or a memory it reports as not available; "+N" instead of the list: N processes, so
// many that the caller's buffer may be too small). FAKE_NVML_INIT=fail makes nvmlInit_v2 fail.
// Declared from NVML's documentation, independently of the probe's own declarations.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Process {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct Gpu {
  int util = -1;
  std::vector<Process> processes;
};

std::vector<Gpu> gpus;

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kInsufficientSize = 7;
constexpr unsigned long long kNotAvailable = ~0ULL;
bool initialised = false;

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (true) {
    size_t end = s.find(sep, at);
    out.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) return out;
    at = end + 1;
  }
}

void Load() {
  gpus.clear();
  const char* spec = std::getenv("FAKE_NVML_GPUS");
  if (!spec || !*spec) return;
  for (const std::string& g : Split(spec, ';')) {
    Gpu gpu;
    const size_t colon = g.find(':');
    const std::string util = g.substr(0, colon), list = colon == std::string::npos ? "" : g.substr(colon + 1);
    gpu.util = util == "-" ? -1 : std::atoi(util.c_str());
    if (!list.empty() && list[0] == '+') {
      for (int i = 0; i < std::atoi(list.c_str() + 1); ++i) gpu.processes.push_back({100000u + i, 1, 0, 0});
    } else if (!list.empty()) {
      for (const std::string& p : Split(list, ',')) {
        const size_t eq = p.find('=');
        const std::string mem = p.substr(eq + 1);
        gpu.processes.push_back({static_cast<unsigned>(std::atoi(p.substr(0, eq).c_str())),
                                 mem == "-" ? kNotAvailable : std::strtoull(mem.c_str(), nullptr, 10), 0, 0});
      }
    }
    gpus.push_back(gpu);
  }
}

}  // namespace

extern "C" {

struct nvmlDevice_st;

int nvmlInit_v2() {
  const char* init = std::getenv("FAKE_NVML_INIT");
  if (init && std::string(init) == "fail") return kNotSupported;
  Load();
  initialised = true;
  return kSuccess;
}

int nvmlShutdown() {
  initialised = false;
  return kSuccess;
}

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialised) return kUninitialized;
  *count = static_cast<unsigned>(gpus.size());
  return kSuccess;
}

// A handle is the GPU's index plus one (never null).
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  if (!initialised) return kUninitialized;
  if (index >= gpus.size()) return kInvalidArgument;
  *device = reinterpret_cast<nvmlDevice_st*>(static_cast<uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_st* device, unsigned* rates /* {gpu, memory} */) {
  const Gpu& gpu = gpus.at(reinterpret_cast<uintptr_t>(device) - 1);
  if (gpu.util < 0) return kNotSupported;
  rates[0] = static_cast<unsigned>(gpu.util);
  rates[1] = 0;
  return kSuccess;
}

// NVML's contract: with too small a buffer, nothing is written, and *count says how many there are.
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_st* device, unsigned* count, Process* infos) {
  const Gpu& gpu = gpus.at(reinterpret_cast<uintptr_t>(device) - 1);
  if (*count < gpu.processes.size()) {
    *count = static_cast<unsigned>(gpu.processes.size());
    return kInsufficientSize;
  }
  for (size_t i = 0; i < gpu.processes.size(); ++i) infos[i] = gpu.processes[i];
  *count = static_cast<unsigned>(gpu.processes.size());
  return kSuccess;
}

}  // extern "C"
