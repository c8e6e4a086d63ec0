// metrics.jsonl: one JSON object per line, appended and flushed as it is written (a crash loses at
// most the line being written), each stamped with "time" (seconds since the Unix epoch) so that
// plots can put wall-clock time on the x axis (dtplot). Written by global rank 0 only.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"

namespace dtrun::worker {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends to `path` (a resumed run continues the same file).
  void Open(const std::string& path);
  // Opens `output_dir`/metrics.jsonl (making the directory) and records where this run's
  // wall-clock axis starts (dtplot --x time): at `epoch`, `global_step` for a resumed run.
  void StartRun(const std::string& output_dir, int64_t epoch, int64_t global_step);
  void Write(nlohmann::json record);

 private:
  std::ofstream out_;
};

}  // namespace dtrun::worker
