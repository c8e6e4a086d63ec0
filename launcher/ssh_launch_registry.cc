#include "launcher/ssh_launch_registry.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/run_registry.h"
#include "base/atomic_file.h"
#include "base/launch_layout.h"
#include "base/runtime_dir.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

absl::Status Register(const SshLaunch& launch, const std::string& command_line, std::string& entry, std::string& dir) {
  absl::StatusOr<std::string> runtime_dir = RuntimeDir();
  if (!runtime_dir.ok()) return runtime_dir.status();
  RemoveLeftoversOfGoneLaunches();
  LaunchRecord r = RecordOfThisProcess(launch_layout::NewLaunchId(), launch.run_id, command_line);
  r.endpoint = launch.endpoint;  // no workers run here: nproc_per_node stays 0
  const std::string launch_dir = launch_layout::LaunchDir(*runtime_dir, r.launch_id);
  if (::mkdir(launch_dir.c_str(), 0700) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", launch_dir, ": ", std::strerror(errno)));
  }
  dir = launch_dir;
  if (absl::Status s = WriteFileAtomically(launch_layout::TokenFile(launch_dir), launch.token + "\n", 0600); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> path = RegisterLaunch(r);
  if (!path.ok()) return path.status();
  entry = *path;
  return absl::OkStatus();
}

}  // namespace

SshLaunchRegistration::SshLaunchRegistration(const SshLaunch& launch, const std::string& command_line) {
  absl::Status s = Register(launch, command_line, entry_, dir_);
  if (!s.ok()) {
    spdlog::warn(
        "{}; `dtrun status` and `dtrun kill` on this machine will not know this job (ask its rendezvous "
        "with --endpoint {})",
        std::string(s.message()), launch.endpoint);
  }
}

SshLaunchRegistration::~SshLaunchRegistration() {
  if (!entry_.empty()) ::unlink(entry_.c_str());
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace dtrun
