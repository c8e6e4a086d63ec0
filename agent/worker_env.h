// Builds each worker's environment: the agent's own environment plus torchrun's variables.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/agent_options.h"

namespace dtrun {

struct WorkerIdentity {
  int local_rank = 0;
  int global_rank = 0;
  int world_size = 1;
  int restart_count = 0;    // the job-wide round
  int group_rank = 0;       // this node's rank in the round
  int group_world_size = 1;
  std::string master_addr;  // the workers' store (the agent of group rank 0)
  int master_port = 0;
  std::string error_file;   // TORCHELASTIC_ERROR_FILE
  std::string stacks_file;  // DTRUN_STACKS_FILE: where the worker writes its stacks when asked
  std::string log_dir;      // this worker's dir of the attempt under --log-dir; empty without one
  int snapshot_fd = -1;     // DTRUN_SNAPSHOT_FD: the agent's snapshot region for this local rank
  int replica_fd = -1;      // DTRUN_SNAPSHOT_REPLICA_FD: its region of buddy copies (-1: none)
};

// Returns "NAME=value" entries. `base` is the agent's environment (inherited by workers);
// dtrun's variables override it, except the tunables the user may set: TORCH_NCCL_ASYNC_ERROR_HANDLING,
// OMP_NUM_THREADS, the socket interfaces, PYTHONFAULTHANDLER and the NCCL flight recorder's.
// --virtual-local-rank: the one device local rank `local_rank` sees, from the launcher's
// CUDA_VISIBLE_DEVICES (its entry at that index) or, without one, the index itself.
std::string VirtualDeviceOf(const std::map<std::string, std::string>& base, int local_rank);

std::vector<std::string> BuildWorkerEnv(const std::map<std::string, std::string>& base,
                                        const AgentOptions& options, const WorkerIdentity& id);

// Parses an environ-style array into a map.
std::map<std::string, std::string> EnvironToMap(char** environ_array);

}  // namespace dtrun
