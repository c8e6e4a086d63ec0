// The launch's flags (`dtrun [options] PROGRAM`) as CLI11 fills them, before validation: shared by
// the files that turn them into a LaunchConfig (launch_config.cc, launch_topology.cc).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "launcher/credentials.h"

namespace CLI {
class App;
}

namespace dtrun {

inline constexpr char kLaunchUsage[] = "dtrun [options] PROGRAM [ARGS...]";

// The raw flag values, before validation.
struct RawFlags {
  std::string nnodes = "1:1", nproc = "1", rdzv_backend = "static", rdzv_endpoint, rdzv_id = "none";
  std::string rdzv_conf, role = "default", log_dir, redirects = "0", tee = "0", ranks_filter;
  std::string master_addr = "127.0.0.1", local_addr, signals = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::string prefix_template, start_method = "spawn", logs_specs, local_rank_flag = "--local-rank";
  std::string event_log, section_timeouts, on_straggler = "warn";
  std::string python;  // --python: the interpreter of Python programs
  bool virtual_local_rank = false;
  // Newer torchrun flags accepted, not applied (CliNotes says so at start).
  std::string numa_binding, event_log_handler, duplicate_stdout_filters, duplicate_stderr_filters;
  double heartbeat_timeout = 0, dstate_timeout = 300, teardown_timeout = 300;
  int max_attempts_without_progress = 3;
  std::string snapshot_memory = "auto";
  int snapshot_every = 0;
  int snapshot_buddy_every = 10;
  std::string failure_domain;
  std::string snapshot_dir;
  double snapshot_dir_every = 60;
  std::string warm_workers = "on";
  int metrics_port = -1;
  std::string metrics_host;
  bool no_progress_line = false;
  int node_rank = 0, master_port = 29500, max_restarts = 0;
  double monitor_interval = 0.1, shutdown_timeout = 30;
  bool standalone = false, module = false, no_python = false, run_path = false, version = false;
  bool append_local_rank = false;
  bool prefix_template_given = false;  // an empty --log-line-prefix-template means "no prefix"
  bool node_rank_given = false;        // by flag, PET_NODE_RANK or Slurm's node id
  // Where the workers meet was chosen (--master-addr/-port, --rdzv-endpoint/-backend by flag or
  // PET_ variable, or Slurm's port): else a single-node job gets a free port, as newest torchrun.
  bool meeting_point_given = false;
  CredentialFlags credentials;
  // Starting the job on several hosts over ssh (launcher/ssh_launch_plan.h).
  std::string hosts, hostfile, ssh_command = "ssh", remote_dtrun;
  std::vector<std::string> forward_env;  // -x NAME[=VALUE]
};

// Defines every launch flag on `app`, in both spellings, with torchrun's PET_ environment form.
void DefineLaunchFlags(CLI::App& app, RawFlags& f);

// A flag's value that cannot be used: InvalidArgument with the one-line message, which names the
// flag and the fix.
inline absl::Status BadFlag(const std::string& what) { return absl::InvalidArgumentError(what); }

}  // namespace dtrun
