// What a launch under Slurm implies (`srun dtrun ...`, one dtrun per node), read from the
// variables Slurm sets: the launcher uses each value only for a flag the user did not give, and
// says in one line what it took from where.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun {

struct SlurmLaunch {
  std::string job_id;
  bool in_step = false;  // under srun (a job step); a batch script alone spans one node
  // Derived values (unset: Slurm does not say), each with the variable it came from.
  std::optional<int> nnodes;
  std::optional<int> node_rank;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<std::string> run_id;
  std::optional<int> nproc_per_node;
  // Under topology/tree: the node's leaf switch, whose fault takes every node under it down.
  std::optional<std::string> failure_domain;
  std::map<std::string, std::string> source;  // flag → "SLURM_NODEID" etc.
};

// nullopt when not under Slurm (no SLURM_JOB_ID). InvalidArgument when Slurm started several
// dtrun tasks on one node (dtrun starts the workers itself: one dtrun per node), or when a
// variable it needs is malformed (the message names it).
absl::StatusOr<std::optional<SlurmLaunch>> ReadSlurmLaunch(const std::map<std::string, std::string>& env);

// The port a job's rendezvous and store use: fixed per job id, in 20000-29999 (below Linux's
// ephemeral ports), so two jobs that share a node do not collide.
int SlurmJobPort(const std::string& job_id);

// "4(x2),1" → {4, 4, 1}: Slurm's per-node counts (SLURM_TASKS_PER_NODE and friends).
absl::StatusOr<std::vector<int>> ExpandSlurmCounts(const std::string& value);

}  // namespace dtrun
