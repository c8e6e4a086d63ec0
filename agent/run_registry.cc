#include "agent/run_registry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/env_names.h"
#include "base/process_table.h"
#include "nlohmann/json.hpp"

namespace dtrun {

std::string RuntimeDir() {
  std::string dir;
  if (const char* d = std::getenv(env::kDtrunRuntimeDir); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv(env::kRuntimeDir); x && *x) {
    dir = absl::StrCat(x, "/dtrun");
  } else {
    dir = absl::StrCat("/tmp/dtrun-", ::getuid());
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ::chmod(dir.c_str(), 0700);
  return dir;
}

absl::StatusOr<std::string> RegisterLaunch(const LaunchRecord& r) {
  nlohmann::json j = {{"launch_id", r.launch_id}, {"run_id", r.run_id},
                      {"pid", r.pid},             {"start_ticks", r.start_ticks},
                      {"nproc_per_node", r.nproc_per_node}, {"command", r.command},
                      {"started_unix", r.started_unix}};
  std::string path = absl::StrCat(RuntimeDir(), "/", r.launch_id, ".json");
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  }
  return path;
}

std::vector<LaunchRecord> ListLaunches() {
  std::vector<LaunchRecord> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(RuntimeDir(), ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;
    LaunchRecord r;
    r.launch_id = j.value("launch_id", "");
    r.run_id = j.value("run_id", "");
    r.pid = j.value("pid", 0);
    r.start_ticks = j.value("start_ticks", 0ull);
    r.nproc_per_node = j.value("nproc_per_node", 0);
    r.command = j.value("command", "");
    r.started_unix = j.value("started_unix", 0ll);
    absl::StatusOr<unsigned long long> ticks = ProcessStartTicks(r.pid);
    if (!ticks.ok() || *ticks != r.start_ticks) {
      std::filesystem::remove(entry.path(), ec);  // its dtrun is gone
      continue;
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dtrun
