#include "status/resource_sampler.h"

#include <unistd.h>

#include "base/process_table.h"

namespace dtrun::status {

ResourceSampler::ResourceSampler() : gpu_(GpuProbe::Open()) {}
ResourceSampler::~ResourceSampler() = default;

std::map<pid_t, ProcessResources> ResourceSampler::Sample(const std::vector<pid_t>& pids,
                                                          std::chrono::steady_clock::time_point now) {
  static const double ticks_per_s = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::map<pid_t, ProcessResources> out;
  std::map<pid_t, Last> next;
  for (pid_t pid : pids) {
    absl::StatusOr<ProcessUsage> usage = ReadProcessUsage(pid);
    if (!usage.ok()) continue;
    ProcessResources& r = out[pid];
    r.rss_bytes = usage->rss_bytes;
    auto it = last_.find(pid);
    const double wall = it == last_.end() ? 0 : std::chrono::duration<double>(now - it->second.at).count();
    if (wall > 0 && usage->cpu_ticks >= it->second.cpu_ticks) {
      r.cpu_percent = 100.0 * (usage->cpu_ticks - it->second.cpu_ticks) / ticks_per_s / wall;
    }
    next[pid] = {usage->cpu_ticks, now};
  }
  last_.swap(next);  // processes that are gone are forgotten
  if (gpu_) {
    for (auto& [pid, usage] : gpu_->Sample(pids)) {
      if (out.count(pid)) out[pid].gpu = usage;
    }
  }
  return out;
}

}  // namespace dtrun::status
