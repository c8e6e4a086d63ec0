#include "status/resource_sampler.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "base/checked_mutex.h"
#include "base/guarded_thread.h"
#include "base/process_table.h"

namespace dtrun::status {

struct ResourceSampler::GpuThread {
  CheckedMutex mu;
  std::vector<pid_t> pids ABSL_GUARDED_BY(mu);           // what the agent last asked about
  std::map<pid_t, GpuUsage> latest ABSL_GUARDED_BY(mu);  // what NVML said last
  bool stop ABSL_GUARDED_BY(mu) = false;

  void Run() {
    std::unique_ptr<GpuProbe> probe = GpuProbe::Open();  // null without a driver: the thread ends
    CheckedMutexLock lock(&mu);
    while (probe && !stop) {
      std::vector<pid_t> asked = pids;
      mu.Unlock();
      std::map<pid_t, GpuUsage> usage = probe->Sample(asked);
      mu.Lock();
      latest.swap(usage);
      mu.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stop; }, std::chrono::seconds(1));
    }
  }

  static std::shared_ptr<GpuThread> Start() {
    auto state = std::make_shared<GpuThread>();
    sigset_t all, old;  // signals stay with the agent's signalfd
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    std::thread([state] { RunGuarded("the GPU sampler", [&] { state->Run(); }, [](const absl::Status&) {}); }).detach();
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return state;
  }
};

ResourceSampler::ResourceSampler() = default;

ResourceSampler::~ResourceSampler() {
  if (!gpu_) return;
  CheckedMutexLock lock(&gpu_->mu);
  gpu_->stop = true;  // the sampler's wait sees it when the lock is released
}

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
  if (!gpu_looked_for_ && !pids.empty()) {
    gpu_looked_for_ = true;
    if (GpuProbe::DriverLoaded()) gpu_ = GpuThread::Start();
  }
  if (gpu_) {
    CheckedMutexLock lock(&gpu_->mu);
    gpu_->pids = pids;
    for (const auto& [pid, usage] : gpu_->latest) {
      if (auto it = out.find(pid); it != out.end()) it->second.gpu = usage;
    }
  }
  return out;
}

}  // namespace dtrun::status
