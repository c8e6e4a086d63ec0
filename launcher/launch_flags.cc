#include "launcher/launch_flags.h"

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/env_names.h"

namespace dtrun {

void DefineLaunchFlags(CLI::App& app, RawFlags& f) {
  // Every flag in both spellings, with torchrun's PET_<NAME> environment form.
  auto opt = [&](const std::string& dashed, auto& var, const std::string& help) {
    std::string snake = dashed;
    std::replace(snake.begin(), snake.end(), '-', '_');
    std::string env = "PET_" + snake;
    std::transform(env.begin(), env.end(), env.begin(), ::toupper);
    std::string names = "--" + dashed + (snake != dashed ? ",--" + snake : "");
    return app.add_option(names, var, help)->envname(env);
  };
  auto flag = [&](const std::string& names, const std::string& env, bool& var, const std::string& help) {
    return app.add_flag(names, var, help)->envname(env);
  };
  opt("nnodes", f.nnodes, "Number of nodes, N or MIN:MAX (elastic)")->capture_default_str();
  opt("nproc-per-node", f.nproc, "Workers per node: an integer, cpu, gpu (or cuda), xpu, or auto (the visible accelerators, else cpu)")->capture_default_str();
  opt("node-rank", f.node_rank, "Rank of this node (static membership); with c10d, where the first round places it")
      ->capture_default_str();
  opt("master-addr", f.master_addr, "Address of the node with rank 0")->capture_default_str();
  opt("master-port", f.master_port, "Port of the workers' store on the master node")->capture_default_str();
  opt("local-addr", f.local_addr, "This node's address (default: its hostname)");
  flag("--standalone", "PET_STANDALONE", f.standalone,
       "Single-node job: free port, fresh run id, no other flags needed");
  opt("max-restarts", f.max_restarts, "Worker-group restarts before failing")->capture_default_str();
  opt("monitor-interval", f.monitor_interval, "Accepted for torchrun compatibility; dtrun reacts to events, it does not poll");
  opt("start-method", f.start_method, "Accepted for compatibility (workers are always new processes)");
  opt("rdzv-backend", f.rdzv_backend, "Rendezvous backend (static, c10d)")->capture_default_str();
  opt("rdzv-endpoint", f.rdzv_endpoint, "Rendezvous endpoint HOST[:PORT]");
  opt("rdzv-id", f.rdzv_id, "Job id shared by all nodes")->capture_default_str();
  opt("rdzv-conf", f.rdzv_conf, "Rendezvous settings: key=value,...");
  opt("role", f.role, "Worker role name")->capture_default_str();
  flag("-m,--module", "PET_MODULE", f.module, "Run PROGRAM as a Python module (python -m)");
  flag("--no-python,--no_python", "PET_NO_PYTHON", f.no_python, "Execute PROGRAM directly, not under Python");
  opt("python", f.python,
      "The Python that runs a .py PROGRAM or -m module, e.g. a venv's bin/python (default: $PYTHON_EXEC, else python3 "
      "on PATH; `python -m dtrun` uses the Python it runs under)");
  flag("--run-path,--run_path", "PET_RUN_PATH", f.run_path, "Accepted for compatibility (same as a .py script)");
  opt("log-dir", f.log_dir, "Keep each attempt's logs under DIR/<run-id>/attempt_N/<local-rank>/");
  app.add_option("-r,--redirects", f.redirects, "Streams sent to log files only: 0-3 or rank:mask,...")
      ->envname("PET_REDIRECTS");
  app.add_option("-t,--tee", f.tee, "Streams sent to log files and the console: 0-3 or rank:mask,...")
      ->envname("PET_TEE");
  app.add_option("--event-log", f.event_log, "Also write this node's event log (JSON lines; docs/DESIGN.md) to FILE");
  opt("on-straggler", f.on_straggler,
      "warn: name a rank or node that holds the job back; replace: also swap its node for a spare, once "
      "(elastic jobs)")
      ->capture_default_str();
  opt("heartbeat-timeout", f.heartbeat_timeout,
      "Seconds without a progress report after which a worker that reports is hung (0: off)")
      ->capture_default_str();
  opt("teardown-timeout", f.teardown_timeout,
      "With --heartbeat-timeout: seconds a worker may take to exit after its last step, or after a worker of its "
      "group exited successfully, before it is hung (0: no bound)")
      ->capture_default_str();
  opt("section-timeout", f.section_timeouts, "Longest time in a reported section: NAME=SECONDS,... e.g. step=60,checkpoint=900");
  opt("dstate-timeout", f.dstate_timeout,
      "Seconds a worker may stay in uninterruptible sleep (D state) before it is hung (0: off)")
      ->capture_default_str();
  opt("max-attempts-without-progress", f.max_attempts_without_progress,
      "End the job when this many attempts in a row pass no step beyond the best before them (0: never)")
      ->capture_default_str();
  opt("snapshot-memory", f.snapshot_memory,
      "Memory each worker's in-memory snapshots may take, in MiB (two versions; auto: a quarter of the machine's "
      "memory shared by the workers; 0: off)")
      ->capture_default_str();
  opt("snapshot-every", f.snapshot_every,
      "Take an in-memory snapshot every N steps (0: as often as costs under 2% of the step time)")
      ->capture_default_str();
  opt("snapshot-buddy-every", f.snapshot_buddy_every,
      "Multi-node: copy a snapshot to the buddy node (the next node rank, or with --failure-domain one in another "
      "domain) about every N steps, so a lost node's ranks restore from memory elsewhere (0: no buddy copies)")
      ->capture_default_str();
  opt("failure-domain", f.failure_domain,
      "Multi-node: what this node shares with others that one fault takes down together (a rack, a leaf switch, "
      "a power feed), as a name; buddy copies go to nodes of other domains, so a lost rack's ranks restore from "
      "memory elsewhere (default under Slurm's topology/tree: the node's leaf switch, from SLURM_TOPOLOGY_ADDR)");
  opt("snapshot-dir", f.snapshot_dir,
      "When the job ends unfinished (interrupted, preempted, out of restarts), keep the newest in-memory snapshots "
      "in DIR; the next run with the same DIR starts from them, also on other nodes or with other --nproc-per-node "
      "(a job that succeeds removes them). Give each job "
      "its own DIR: the files of a job still running are not loaded");
  opt("snapshot-dir-every", f.snapshot_dir_every,
      "Also copy each rank's newest snapshot to --snapshot-dir this often while the job runs, in seconds, for a "
      "stop that gives dtrun no time; less often when copying takes over a tenth of the time (0: only when the "
      "job ends)")
      ->capture_default_str();
  opt("warm-workers", f.warm_workers,
      "on: keep the next attempt's workers started and parked, so a restart releases them instead of starting "
      "programs cold (only for programs that say they can be parked, as the worker library's); off: never")
      ->capture_default_str();
  opt("metrics-port", f.metrics_port,
      "Serve Prometheus metrics (/metrics) and this node's status (/status) over HTTP on PORT (0: a free one)");
  opt("metrics-host", f.metrics_host, "Address the metrics endpoint listens on (default: every IPv4 address; :: for IPv6 too)");
  flag("--no-progress-line", "PET_NO_PROGRESS_LINE", f.no_progress_line,
       "No status line below the workers' output on a terminal");
  opt("local-ranks-filter", f.ranks_filter, "Show only these local ranks on the console, e.g. 0,2");
  opt("log-line-prefix-template", f.prefix_template, "Console prefix; ${role_name}, ${rank}, ${local_rank}");
  opt("logs-specs", f.logs_specs, "Accepted for compatibility");
  opt("signals-to-handle", f.signals, "Signals forwarded to the workers")->capture_default_str();
  opt("shutdown-timeout", f.shutdown_timeout, "Seconds between the stop signal and SIGKILL")->capture_default_str();
  app.add_flag("--append-local-rank", f.append_local_rank,
               "Legacy torch.distributed.launch scripts: append --local-rank=<local rank> to their arguments");
  app.add_option("--local-rank-flag", f.local_rank_flag,
                 "The flag --append-local-rank appends (older scripts: --local_rank)")
      ->capture_default_str();
  flag("--virtual-local-rank,--virtual_local_rank", "PET_VIRTUAL_LOCAL_RANK", f.virtual_local_rank,
       "Every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES of its one device (as torchrun)");
  opt("numa-binding", f.numa_binding,
      "Bind each worker to CPUs near its GPU (local rank r: GPU r; without GPUs "
      "the ranks are spread over the NUMA nodes): node, socket, exclusive (its own "
      "physical cores of the node) or core-complex (its own L3 cache)");
  opt("event-log-handler", f.event_log_handler, "Accepted for torchrun compatibility; dtrun's event log is "
                                                "--event-log FILE");
  opt("duplicate-stdout-filters", f.duplicate_stdout_filters,
      "With --log-dir: workers' stdout lines that contain any "
      "of these (a,b) are also copied, prefixed, into "
      "attempt_N/filtered_stdout.log");
  opt("duplicate-stderr-filters", f.duplicate_stderr_filters, "The same for stderr: attempt_N/filtered_stderr.log");
  app.add_option("-H,--hosts", f.hosts,
                 "Start the job on these hosts over ssh from here, e.g. a:4,b:4 (HOST:WORKERS; without :N, "
                 "--nproc-per-node); the first host serves the rendezvous");
  app.add_option("--hostfile", f.hostfile, "As -H, from a file: a line per host, HOST slots=N (or HOST:N)");
  app.add_option("--ssh-command", f.ssh_command, "With -H: the remote shell and its options, e.g. \"ssh -p 2222\"")
      ->capture_default_str();
  app.add_option("--remote-dtrun", f.remote_dtrun, "With -H: dtrun's path on the hosts (default: this dtrun's)");
  app.add_option("-x,--env", f.forward_env,
                 "With -H: also give the hosts this variable (NAME: its value here; NAME=VALUE); PATH, the Python "
                 "and library paths, NCCL_*, CUDA_*, TORCH_* and a few more go by default")
      ->allow_extra_args(false);
  AddCredentialFlags(app, f.credentials);
  app.add_flag("--version", f.version, "Print the version and exit");
}

}  // namespace dtrun
