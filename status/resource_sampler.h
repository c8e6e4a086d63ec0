// CPU, memory and GPU use of worker processes, sampled by the agent about once a second for
// `dtrun status` and the metrics endpoint. CPU % is over the time since the process's previous
// sample (unknown at its first); the worker process itself, not its children. GPU numbers come
// from a thread of their own (NVML's start-up can take seconds, and a wedged GPU can stall a
// query): the agent's loop only reads the latest.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include "status/gpu_probe.h"

namespace dtrun::status {

struct ProcessResources {
  double cpu_percent = -1;
  int64_t rss_bytes = -1;
  GpuUsage gpu;
};

class ResourceSampler {
 public:
  ResourceSampler();
  ~ResourceSampler();  // the GPU thread is told to stop and left to end on its own
  std::map<pid_t, ProcessResources> Sample(const std::vector<pid_t>& pids, std::chrono::steady_clock::time_point now);

  struct GpuThread;

 private:
  struct Last {
    uint64_t cpu_ticks;
    std::chrono::steady_clock::time_point at;
  };
  std::map<pid_t, Last> last_;
  std::shared_ptr<GpuThread> gpu_;  // started at the first sample with workers
  bool gpu_looked_for_ = false;     // once: no thread for NVML on a machine without NVIDIA's driver
};

}  // namespace dtrun::status
