#include "worker/metrics_log.h"

#include <chrono>

namespace dtrun::worker {

void MetricsLog::Open(const std::string& path) { out_.open(path, std::ios::app); }

void MetricsLog::Write(nlohmann::json record) {
  if (!out_.is_open()) return;
  record["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  out_ << record.dump() << "\n" << std::flush;
}

}  // namespace dtrun::worker
