#include "worker/metrics_log.h"

#include <chrono>
#include <filesystem>

namespace dtrun::worker {

void MetricsLog::Open(const std::string& path) { out_.open(path, std::ios::app); }

void MetricsLog::StartRun(const std::string& output_dir, int64_t epoch, int64_t global_step) {
  std::filesystem::create_directories(output_dir);
  Open(output_dir + "/metrics.jsonl");
  Write({{"kind", "start"}, {"epoch", epoch}, {"global_step", global_step}});
}

void MetricsLog::Write(nlohmann::json record) {
  if (!out_.is_open()) return;
  record["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  out_ << record.dump() << "\n" << std::flush;
}

}  // namespace dtrun::worker
