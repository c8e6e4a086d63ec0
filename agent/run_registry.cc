#include "agent/run_registry.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/atomic_file.h"
#include "base/env_names.h"
#include "base/launch_layout.h"
#include "base/process_table.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "base/untrusted_file.h"
#include "nlohmann/json.hpp"

namespace dtrun {

LaunchRecord RecordOfThisProcess(std::string launch_id, std::string run_id, std::string command) {
  LaunchRecord r;
  r.launch_id = std::move(launch_id);
  r.run_id = std::move(run_id);
  r.pid = ::getpid();
  r.start_ticks = ProcessStartTicks(r.pid).value_or(0);
  r.command = std::move(command);
  r.started_unix =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return r;
}

absl::StatusOr<std::string> RegisterLaunch(const LaunchRecord& r) {
  nlohmann::json j = {{"launch_id", r.launch_id}, {"run_id", r.run_id},
                      {"pid", r.pid},             {"start_ticks", r.start_ticks},
                      {"nproc_per_node", r.nproc_per_node}, {"command", r.command},
                      {"started_unix", r.started_unix}};
  if (!r.endpoint.empty()) j["endpoint"] = r.endpoint;
  if (!r.service.empty()) {
    j["node_rank"] = r.node_rank;
    j["service"] = r.service;
  }
  DT_ASSIGN_OR_RETURN(std::string dir, RuntimeDir());
  std::string path = launch_layout::RegistryEntry(dir, r.launch_id);
  DT_RETURN_IF_ERROR(WriteFileAtomically(path, j.dump() + "\n", 0600));
  return path;
}

namespace {

constexpr size_t kMaxRecordBytes = 64 << 10;

// The record at `path`, or nullopt if it is not a small regular file of well-typed JSON.
std::optional<LaunchRecord> ReadRecord(const std::string& path) {
  absl::StatusOr<std::string> text = ReadUntrustedFile(path, kMaxRecordBytes);
  if (!text.ok()) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto str = [&](const char* k) { return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : ""; };
  auto num = [&](const char* k, long long absent = 0) {
    return j.contains(k) && j[k].is_number_integer() ? j[k].get<long long>() : absent;
  };
  LaunchRecord r;
  r.launch_id = str("launch_id");
  r.run_id = str("run_id");
  r.pid = static_cast<pid_t>(num("pid"));
  r.start_ticks = static_cast<unsigned long long>(num("start_ticks"));
  r.nproc_per_node = static_cast<int>(num("nproc_per_node"));
  r.command = str("command");
  r.started_unix = num("started_unix");
  r.endpoint = str("endpoint");
  const long long node_rank = num("node_rank", -1);
  r.node_rank = node_rank >= 0 && node_rank <= INT32_MAX ? static_cast<int>(node_rank) : -1;
  r.service = str("service");
  if (r.pid <= 0) return std::nullopt;
  return r;
}

// Removes `record`, read from `path`, if the dtrun it names is gone (the pid has exited, or now
// belongs to another process); true if removed.
bool RemoveIfGone(const std::string& path, const LaunchRecord& record) {
  absl::StatusOr<unsigned long long> ticks = ProcessStartTicks(record.pid);
  if (ticks.ok() && *ticks == record.start_ticks) return false;
  std::error_code ec;
  return std::filesystem::remove(path, ec) && !ec;
}

}  // namespace

std::vector<LaunchRecord> ListLaunches() {
  std::vector<LaunchRecord> out;
  absl::StatusOr<std::string> dir = RuntimeDir();
  if (!dir.ok()) return out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(*dir, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::optional<LaunchRecord> r = ReadRecord(entry.path().string());
    if (r && !RemoveIfGone(entry.path().string(), *r)) out.push_back(std::move(*r));
  }
  return out;
}

bool AnotherLaunchRunsNode(const std::string& run_id, const std::string& service, int node_rank) {
  const std::vector<LaunchRecord> live = ListLaunches();
  return std::any_of(live.begin(), live.end(), [&](const LaunchRecord& r) {
    return r.pid != ::getpid() && !service.empty() && r.service == service && r.node_rank == node_rank &&
           r.run_id == run_id;
  });
}

int RemoveLeftoversOfGoneLaunches() {
  absl::StatusOr<std::string> dir = RuntimeDir();
  if (!dir.ok()) return 0;
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(*dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".json") {
      // Not a record of ours (ReadRecord refuses it): left alone.
      std::optional<LaunchRecord> r = ReadRecord(entry.path().string());
      removed += r && RemoveIfGone(entry.path().string(), *r) ? 1 : 0;
      continue;
    }
    const pid_t pid = launch_layout::PidOfLaunchId(name);
    if (pid < 0 || !entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    absl::StatusOr<unsigned long long> ticks = ProcessStartTicks(pid);
    if (ticks.ok()) {
      // Alive: ours unless its record says another process had the pid.
      std::optional<LaunchRecord> r = ReadRecord(launch_layout::RegistryEntry(*dir, name));
      if (!r || r->start_ticks == *ticks) continue;
    }
    std::filesystem::remove_all(entry.path(), ec);
    removed += ec ? 0 : 1;
  }
  return removed;
}

}  // namespace dtrun
