#include "base/launch_layout.h"

#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/random_hex.h"

namespace dtrun::launch_layout {

std::string NewLaunchId() { return absl::StrCat(::getpid(), "-", RandomHex(8)); }

pid_t PidOfLaunchId(const std::string& name) {
  const size_t dash = name.find('-');
  if (dash == std::string::npos || dash == 0 || name.size() - dash - 1 != 8) return -1;
  if (name.find_first_not_of("0123456789") != dash) return -1;
  if (name.find_first_not_of("0123456789abcdef", dash + 1) != std::string::npos) return -1;
  long pid = 0;
  if (!absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0 || pid > (1 << 22)) return -1;
  return static_cast<pid_t>(pid);
}

std::string RegistryEntry(const std::string& runtime_dir, const std::string& launch_id) {
  return absl::StrCat(runtime_dir, "/", launch_id, ".json");
}

std::string LaunchDir(const std::string& runtime_dir, const std::string& launch_id) {
  return absl::StrCat(runtime_dir, "/", launch_id);
}

std::string ProgressSocket(const std::string& launch_dir, int local_rank) {
  return absl::StrCat(launch_dir, "/progress.", local_rank, ".sock");
}

std::string StatusSnapshot(const std::string& launch_dir) { return launch_dir + "/status.json"; }

std::string TimerFile(const std::string& launch_dir) { return launch_dir + "/watchdog_timer"; }

std::string TokenFile(const std::string& launch_dir) { return launch_dir + "/rdzv_token"; }

std::string AttemptDir(const std::string& root, int64_t round) { return absl::StrCat(root, "/attempt_", round); }

std::string RankDir(const std::string& root, int64_t round, int local_rank) {
  return absl::StrCat(AttemptDir(root, round), "/", local_rank);
}

std::string ErrorFile(const std::string& rank_dir) { return rank_dir + "/error.json"; }

std::string StacksFile(const std::string& rank_dir) { return rank_dir + "/stacks.txt"; }

}  // namespace dtrun::launch_layout
