#include "status/kfd_probe.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/kernel_file.h"

namespace dtrun::status {
std::unique_ptr<GpuProbe> KfdProbe::Open(const std::string& root) {
  std::vector<KfdGpu> gpus = ReadKfdGpus(root);
  if (gpus.empty()) return nullptr;
  return std::unique_ptr<GpuProbe>(new KfdProbe(root, std::move(gpus)));
}

std::map<pid_t, GpuUsage> KfdProbe::Sample(const std::vector<pid_t>& pids) {
  constexpr double kNotRead = -2;
  std::vector<double> busy(gpus_.size(), kNotRead);  // each GPU's read once a sample, if a worker uses it
  auto busy_percent = [&](size_t g) {
    if (busy[g] == kNotRead) {
      std::optional<int64_t> percent;
      if (gpus_[g].drm_render_minor >= 0) {
        percent = ReadKernelNumber(
            absl::StrCat(root_, "/sys/class/drm/renderD", gpus_[g].drm_render_minor, "/device/gpu_busy_percent"));
      }
      busy[g] = percent && *percent >= 0 ? static_cast<double>(*percent) : -1.0;
    }
    return busy[g];
  };
  std::map<pid_t, GpuUsage> out;
  for (pid_t pid : pids) {
    const std::string vram_of = absl::StrCat(root_, "/sys/class/kfd/kfd/proc/", pid, "/vram_");
    std::optional<size_t> best;
    int64_t most = -1;
    for (size_t g = 0; g < gpus_.size(); ++g) {
      if (gpus_[g].gpu_id < 0) continue;
      std::optional<int64_t> vram = ReadKernelNumber(absl::StrCat(vram_of, gpus_[g].gpu_id));
      if (vram && *vram >= 0 && *vram > most) {
        most = *vram;
        best = g;
      }
    }
    if (!best) continue;  // holds no GPU, or is no ROCm process
    out[pid] = GpuUsage{busy_percent(*best), most};
  }
  return out;
}

}  // namespace dtrun::status
