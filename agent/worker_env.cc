#include "agent/worker_env.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/env_names.h"

namespace dtrun {

std::string VirtualDeviceOf(const std::map<std::string, std::string>& base, int local_rank) {
  auto visible = base.find(env::kCudaVisibleDevices);
  if (visible == base.end()) return absl::StrCat(local_rank);
  std::vector<std::string> devices = absl::StrSplit(visible->second, ',');
  // More workers than listed devices: the same index past the list (CUDA then sees none, as the
  // worker would have under torchrun).
  return local_rank < static_cast<int>(devices.size()) ? devices[local_rank] : absl::StrCat(local_rank);
}

std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const AgentOptions& o, const WorkerIdentity& id) {
  std::map<std::string, std::string> env = base;
  env[env::kLocalRank] = absl::StrCat(id.local_rank);
  if (o.virtual_local_rank) {
    // As torchrun's --virtual-local-rank: every worker is local rank 0 of a one-device view.
    env[env::kLocalRank] = "0";
    env[env::kCudaVisibleDevices] = VirtualDeviceOf(base, id.local_rank);
  }
  env[env::kRank] = absl::StrCat(id.global_rank);
  env[env::kGroupRank] = absl::StrCat(id.group_rank);
  env[env::kRoleRank] = absl::StrCat(id.global_rank);
  env[env::kRoleName] = o.role;
  env[env::kLocalWorldSize] = absl::StrCat(o.nproc_per_node);
  env[env::kWorldSize] = absl::StrCat(id.world_size);
  env[env::kGroupWorldSize] = absl::StrCat(id.group_world_size);
  env[env::kRoleWorldSize] = absl::StrCat(id.world_size);
  env[env::kMasterAddr] = id.master_addr;
  env[env::kMasterPort] = absl::StrCat(id.master_port);
  env[env::kRestartCount] = absl::StrCat(id.restart_count);
  env[env::kMaxRestarts] = absl::StrCat(o.max_restarts);
  env[env::kRunId] = o.run_id;
  env[env::kUseAgentStore] = "True";
  env[env::kErrorFile] = id.error_file;
  env.emplace(env::kNcclAsyncErrorHandling, "1");
  if (o.set_omp_num_threads) env.emplace(env::kOmpNumThreads, "1");
  if (!o.socket_ifname.empty()) {
    env.emplace(env::kGlooSocketIfname, o.socket_ifname);
    env.emplace(env::kNcclSocketIfname, o.socket_ifname);
  }
  env.emplace(env::kPythonFaultHandler, "1");
  if (!id.log_dir.empty()) {
    // A collective timeout leaves each rank's recent collectives where the user looks.
    env.emplace(env::kNcclTraceBufferSize, "2000");
    env.emplace(env::kNcclDumpOnTimeout, "1");
    env.emplace(env::kNcclDebugInfoTempFile, id.log_dir + "/nccl_trace_rank_");
  }
  if (!o.progress_dir.empty()) {
    env[env::kProgressSocket] = ProgressSocketPath(o, id.local_rank);
    if (!id.stacks_file.empty()) env[env::kStacksFile] = id.stacks_file;
  }
  if (!o.timer_file.empty()) env[env::kTimerFile] = o.timer_file;
  if (id.snapshot_fd >= 0) {
    env[env::kSnapshotFd] = std::to_string(id.snapshot_fd);
    if (o.snapshot_every > 0) env[env::kSnapshotEvery] = std::to_string(o.snapshot_every);
    if (id.replica_fd >= 0) env[env::kSnapshotReplicaFd] = std::to_string(id.replica_fd);
  }
  if (!o.python_dir.empty()) {
    // Appended: the user's own modules keep precedence over dtrun's.
    auto path = env.find(env::kPythonPath);
    env[env::kPythonPath] = path == env.end() || path->second.empty() ? o.python_dir : path->second + ":" + o.python_dir;
    if (!o.xxhash_library.empty()) env[env::kXxhashLibrary] = o.xxhash_library;
  }
  env[env::kLaunchId] = o.launch_id;

  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(absl::StrCat(name, "=", value));
  return out;
}

std::map<std::string, std::string> EnvironToMap(char** environ_array) {
  std::map<std::string, std::string> env;
  for (char** e = environ_array; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq != std::string::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

}  // namespace dtrun
