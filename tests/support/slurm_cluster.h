// Test support: a real Slurm (Debian's slurm-wlm and munge) on network-namespace hosts — slurmctld
// on host 0 ("ctl"), one slurmd per further host ("n0", "n1", ...), each in its own namespace with
// its own address, host name and the machine's cgroup hierarchies, one munged for all. Everything
// runs in the foreground under the test and ends with it. Commands such as sbatch and srun run on
// a host through Exec(), with SLURM_CONF pointing at this cluster's configuration.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/netns_cluster.h"
#include "tests/support/process_harness.h"

namespace dtrun::testing {

class SlurmCluster {
 public:
  // Empty if a Slurm cluster can be made here; else the reason (for GTEST_SKIP).
  static std::string Unavailable();

  explicit SlurmCluster(int nodes);
  // Up: every node idle (bounded wait). Otherwise error() says what failed.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  // argv prefix that runs a command on compute node `i` (its namespace), and the environment the
  // Slurm commands need.
  std::vector<std::string> Exec(int node) const { return net_->Exec(node + 1); }
  std::map<std::string, std::string> Env() const { return {{"SLURM_CONF", conf_}}; }
  // Runs a Slurm command (sbatch, srun, squeue, scontrol, ...) from node 0 with Env() plus `env`;
  // its exit code and output.
  std::pair<int, std::string> Run(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) const;
  const std::string& dir() const { return dir_; }

 private:
  bool WaitForIdleNodes(int nodes);
  std::unique_ptr<NetnsCluster> net_;
  std::string dir_, conf_, error_;
  std::vector<std::unique_ptr<Harness>> daemons_;
};

}  // namespace dtrun::testing
