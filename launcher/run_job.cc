#include "launcher/run_job.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/agent.h"
#include "agent/launch_guard.h"
#include "agent/run_registry.h"
#include "base/process_table.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

std::string RandomHex(int digits) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[rd() % 16];
  return out;
}

// DIR/<run_id>, or DIR/<run_id>_<n> if that exists: an earlier run's logs are never touched.
absl::StatusOr<std::string> FreshLogRoot(const std::string& dir, const std::string& run_id) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || ::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--log-dir ", dir, " is not writable", ec ? " (" + ec.message() + ")" : "",
        "; choose a directory you can write"));
  }
  for (int n = 0;; ++n) {
    std::string root = n == 0 ? absl::StrCat(dir, "/", run_id) : absl::StrCat(dir, "/", run_id, "_", n);
    if (::mkdir(root.c_str(), 0755) == 0) return root;
    if (errno != EEXIST) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create ", root, ": ", strerror(errno)));
    }
  }
}

bool WantsLogFiles(const AgentOptions& a) {
  for (const auto* spec : {&a.redirects, &a.tee}) {
    for (const auto& [rank, mask] : *spec) {
      if (mask != 0) return true;
    }
  }
  return false;
}

}  // namespace

int RunJob(LaunchConfig config, const std::map<std::string, std::string>& env,
           const std::string& command_line) {
  AgentOptions& a = config.agent;
  a.launch_id = absl::StrCat(::getpid(), "-", RandomHex(8));
  if (config.standalone) {
    std::string h = RandomHex(32);  // formatted like torchrun's uuid4 run ids
    a.run_id = absl::StrCat(h.substr(0, 8), "-", h.substr(8, 4), "-", h.substr(12, 4), "-",
                            h.substr(16, 4), "-", h.substr(20));
  }

  AttemptPaths paths;
  std::string private_dir = absl::StrCat(RuntimeDir(), "/", a.launch_id);
  if (!config.log_dir.empty()) {
    absl::StatusOr<std::string> root = FreshLogRoot(config.log_dir, a.run_id);
    if (!root.ok()) {
      spdlog::error("{}", std::string(root.status().message()));
      return 2;
    }
    paths.log_root = *root;
  } else if (WantsLogFiles(a)) {
    paths.log_root = absl::StrCat("/tmp/dtrun_", a.run_id, "_", RandomHex(6));
    spdlog::info("--redirects/--tee without --log-dir: logs go to {}", paths.log_root);
  }
  paths.error_root = paths.log_root.empty() ? private_dir : paths.log_root;

  LaunchRecord record;
  record.launch_id = a.launch_id;
  record.run_id = a.run_id;
  record.pid = ::getpid();
  record.start_ticks = ProcessStartTicks(record.pid).value_or(0);
  record.nproc_per_node = a.nproc_per_node;
  record.command = command_line;
  record.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
  absl::StatusOr<std::string> registry_file = RegisterLaunch(record);
  if (!registry_file.ok()) spdlog::warn("{}; `dtrun kill` will still find the workers", std::string(registry_file.status().message()));
  LaunchGuard guard = LaunchGuard::Start(a.launch_id, registry_file.value_or(""));
  BlockAgentSignals(a.signals_to_handle);

  if (config.omp_warning) {
    spdlog::warn(
        "\n*****************************************\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
        "your system being overloaded, please further tune the variable for optimal performance in "
        "your application as needed. \n*****************************************");
  }
  int rc;
  {
    Agent agent(a, paths, env);
    rc = agent.Run();
  }
  std::error_code ec;
  std::filesystem::remove_all(private_dir, ec);
  if (registry_file.ok()) ::unlink(registry_file->c_str());
  guard.Dismiss();
  return rc;
}

}  // namespace dtrun
