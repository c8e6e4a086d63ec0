#include "launcher/launch_config.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/build_info.h"
#include "base/env_names.h"
#include "base/random_hex.h"
#include "base/signal_names.h"
#include "agent/snapshot_store.h"
#include "base/status_macros.h"
#include "launcher/slurm_env.h"
#include "launcher/subcommand_cli.h"
#include "progress/report_protocol.h"

namespace dtrun {
namespace {

constexpr char kUsage[] = "dtrun [options] PROGRAM [ARGS...]";
constexpr int kMaxNprocPerNode = 1024;

absl::Status Bad(const std::string& what) { return absl::InvalidArgumentError(what); }

// Formatted like torchrun's uuid4 run ids.
std::string FreshRunId() {
  std::string h = RandomHex(32);
  return absl::StrCat(h.substr(0, 8), "-", h.substr(8, 4), "-", h.substr(12, 4), "-", h.substr(16, 4), "-",
                      h.substr(20));
}

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
  std::string warm_workers = "on";
  int metrics_port = -1;
  std::string metrics_host;
  bool no_progress_line = false;
  int node_rank = 0, master_port = 29500, max_restarts = 0;
  double monitor_interval = 0.1, shutdown_timeout = 30;
  bool standalone = false, module = false, no_python = false, run_path = false, version = false;
  bool append_local_rank = false;
  bool prefix_template_given = false;  // an empty --log-line-prefix-template means "no prefix"
  // Where the workers meet was chosen (--master-addr/-port, --rdzv-endpoint/-backend by flag or
  // PET_ variable, or Slurm's port): else a single-node job gets a free port, as newest torchrun.
  bool meeting_point_given = false;
  CredentialFlags credentials;
};

void DefineFlags(CLI::App& app, RawFlags& f) {
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
  opt("node-rank", f.node_rank, "Rank of this node (static membership)")->capture_default_str();
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
      "Multi-node: copy a snapshot to the buddy node (the next node rank) about every N steps, so a lost node's "
      "ranks restore from memory elsewhere (0: no buddy copies)")
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
  opt("numa-binding", f.numa_binding, "Accepted for torchrun compatibility; not applied (bind with numactl or "
                                      "taskset in PROGRAM)");
  opt("event-log-handler", f.event_log_handler, "Accepted for torchrun compatibility; dtrun's event log is "
                                                "--event-log FILE");
  opt("duplicate-stdout-filters", f.duplicate_stdout_filters, "Accepted for torchrun compatibility; not applied "
                                                              "(--tee and --log-dir keep every line)");
  opt("duplicate-stderr-filters", f.duplicate_stderr_filters, "Accepted for torchrun compatibility; not applied "
                                                              "(--tee and --log-dir keep every line)");
  AddCredentialFlags(app, f.credentials);
  app.add_flag("--version", f.version, "Print the version and exit");
}

// A timeout flag in seconds: finite, 0 (off) or positive, at most a week.
absl::StatusOr<std::chrono::milliseconds> TimeoutFlag(const std::string& flag, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 7 * 86400) {
    return Bad(absl::StrCat(flag, " ", seconds, ": expected seconds between 0 (off) and 604800"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

absl::Status FillHangOptions(const RawFlags& f, AgentOptions& a) {
  DT_ASSIGN_OR_RETURN(std::chrono::milliseconds beat, TimeoutFlag("--heartbeat-timeout", f.heartbeat_timeout));
  if (beat.count() > 0) a.hang.heartbeat_timeout = beat;
  DT_ASSIGN_OR_RETURN(std::chrono::milliseconds teardown, TimeoutFlag("--teardown-timeout", f.teardown_timeout));
  a.hang.teardown_timeout = teardown.count() > 0 ? std::optional<std::chrono::milliseconds>(teardown) : std::nullopt;
  DT_ASSIGN_OR_RETURN(std::chrono::milliseconds dstate, TimeoutFlag("--dstate-timeout", f.dstate_timeout));
  a.dstate_timeout = dstate;
  DT_ASSIGN_OR_RETURN(auto sections, ParseSectionTimeouts(f.section_timeouts));
  a.hang.section_timeouts = sections;
  if (f.max_attempts_without_progress < 0) {
    return Bad(absl::StrCat("--max-attempts-without-progress ", f.max_attempts_without_progress,
                            ": expected 0 (never) or a count of attempts"));
  }
  a.max_attempts_without_progress = f.max_attempts_without_progress;
  return absl::OkStatus();
}

absl::Status FillSnapshotOptions(const RawFlags& f, AgentOptions& a) {
  if (f.snapshot_every < 0) {
    return Bad(absl::StrCat("--snapshot-every ", f.snapshot_every, ": expected 0 (adaptive) or a count of steps"));
  }
  a.snapshot_every = f.snapshot_every;
  if (f.snapshot_buddy_every < 0) {
    return Bad(absl::StrCat("--snapshot-buddy-every ", f.snapshot_buddy_every, ": expected 0 (off) or a count of steps"));
  }
  a.snapshot_buddy_every = f.snapshot_buddy_every;
  if (f.warm_workers != "on" && f.warm_workers != "off") {
    return Bad(absl::StrCat("--warm-workers ", f.warm_workers.substr(0, 32), ": expected on or off"));
  }
  a.warm_workers = f.warm_workers == "on";
  if (f.snapshot_memory == "auto") {
    a.snapshot_bytes_per_worker = DefaultSnapshotBytes(a.nproc_per_node);
    return absl::OkStatus();
  }
  int64_t mib = 0;
  constexpr int64_t kMaxMib = int64_t{1} << 30;  // 1 PiB
  const uint64_t min_mib = (snapshot::kMinRegionBytes + (1 << 20) - 1) >> 20;
  if (!absl::SimpleAtoi(f.snapshot_memory, &mib) || mib < 0 || mib > kMaxMib ||
      (mib > 0 && static_cast<uint64_t>(mib) < min_mib)) {
    return Bad(absl::StrCat("--snapshot-memory ", f.snapshot_memory, ": expected auto, 0 (off) or MiB from ",
                            min_mib, " to ", kMaxMib));
  }
  a.snapshot_bytes_per_worker = static_cast<uint64_t>(mib) << 20;
  return absl::OkStatus();
}

absl::Status FillStatusOptions(const RawFlags& f, AgentOptions& a) {
  if (f.metrics_port > 65535 || f.metrics_port < -1) {
    return Bad(absl::StrCat("--metrics-port ", f.metrics_port, ": expected a port, 0 to 65535 (0: a free one)"));
  }
  if (f.metrics_port >= 0) a.metrics_port = f.metrics_port;
  if (!f.metrics_host.empty()) {
    in6_addr any;
    const int family = f.metrics_host.find(':') != std::string::npos ? AF_INET6 : AF_INET;
    if (::inet_pton(family, f.metrics_host.c_str(), &any) != 1) {
      return Bad(absl::StrCat("--metrics-host ", f.metrics_host, ": expected a numeric IPv4 or IPv6 address"));
    }
    if (!a.metrics_port) return Bad("--metrics-host needs --metrics-port");
  }
  a.metrics_host = f.metrics_host;
  a.progress_line = !f.no_progress_line;  // and only on a terminal (decided at launch)
  return absl::OkStatus();
}

// torchrun's environment defaults for flags not given (by flag or PET_ variable).
absl::Status ApplyTorchElasticEnvironment(const CLI::App& app, const std::map<std::string, std::string>& env,
                                          RawFlags& f) {
  auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  if (auto v = env.find(env::kShutdownTimeout); v != env.end() && !given("--shutdown-timeout")) {
    if (!absl::SimpleAtod(v->second, &f.shutdown_timeout)) {
      return Bad(absl::StrCat(env::kShutdownTimeout, "='", v->second, "': expected seconds, e.g. 120"));
    }
  }
  if (auto v = env.find(env::kSignalsToHandle); v != env.end() && !given("--signals-to-handle")) f.signals = v->second;
  return absl::OkStatus();
}

// Under Slurm (srun dtrun ...): the job's values for the flags the user did not give (by flag or
// PET_ variable). Returns the line that says what was taken from where ("" outside Slurm).
absl::StatusOr<std::string> ApplySlurmLaunch(const CLI::App& app, const std::map<std::string, std::string>& env,
                                             RawFlags& f) {
  absl::StatusOr<std::optional<SlurmLaunch>> read = ReadSlurmLaunch(env);
  if (!read.ok()) return Bad(absl::StrCat("under Slurm: ", read.status().message()));
  if (!*read) return std::string();
  const SlurmLaunch& s = **read;
  auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  const bool single = f.standalone || given("--rdzv-endpoint");  // the user chose how nodes meet
  std::vector<std::string> taken;
  auto take = [&](const char* flag, const auto& value, auto& field, bool allowed) {
    if (!value || given(flag) || !allowed) return;
    field = *value;
    taken.push_back(absl::StrCat(flag, " ", *value, " (", s.source.at(flag), ")"));
  };
  std::optional<std::string> nnodes = s.nnodes ? std::optional<std::string>(absl::StrCat(*s.nnodes)) : std::nullopt;
  std::optional<std::string> nproc =
      s.nproc_per_node ? std::optional<std::string>(absl::StrCat(*s.nproc_per_node)) : std::nullopt;
  take("--nnodes", nnodes, f.nnodes, !single);
  take("--node-rank", s.node_rank, f.node_rank, !single);
  take("--master-addr", s.master_addr, f.master_addr, !single);
  take("--master-port", s.master_port, f.master_port, !single);
  f.meeting_point_given = f.meeting_point_given || (s.master_port && !single);
  take("--rdzv-id", s.run_id, f.rdzv_id, !f.standalone);
  take("--nproc-per-node", nproc, f.nproc, true);
  if (!given("--signals-to-handle")) {
    // Slurm warns a job before preempting it (sbatch --signal=USR1@120): the workers get it.
    f.signals += ",SIGUSR1,SIGUSR2";
    taken.push_back("SIGUSR1 and SIGUSR2 forwarded to the workers (Slurm's warnings before preemption)");
  }
  std::string note = absl::StrCat("under Slurm job ", s.job_id, taken.empty() ? ": every setting was given" : ": ",
                                  absl::StrJoin(taken, ", "));
  if (!s.in_step) absl::StrAppend(&note, "; not in an srun step, so this node runs alone (srun dtrun spans the job's nodes)");
  return note;
}

absl::Status ResolveProgram(const RawFlags& f, const std::vector<std::string>& rest,
                            const std::map<std::string, std::string>& env, const HostProbe& host,
                            AgentOptions& a) {
  if (rest.empty()) return Bad(absl::StrCat("missing the program to run; usage: ", kUsage));
  const std::string& program = rest[0];
  if (absl::StartsWith(program, "-") && program != "-") {
    return Bad(absl::StrCat("unknown option ", program, "; run dtrun --help for the list"));
  }
  if (f.module && f.no_python) return Bad("--module and --no-python cannot be used together; drop one");
  a.program_name = program;
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  bool python = f.module || (!f.no_python && absl::EndsWith(program, ".py"));
  if (!python) {
    absl::StatusOr<std::string> exe = host.FindExecutable(program);
    if (!exe.ok()) return Bad(std::string(exe.status().message()));
    a.executable = *exe;
    a.argv = {program};
  } else {
    if (!f.module && !host.Readable(program)) {
      return Bad(absl::StrCat(program, ": no such file (or not readable)"));
    }
    // As torchrun: PYTHON_EXEC, else the interpreter dtrun runs under (`python -m dtrun` sets
    // PYTHON_EXEC to it), else python3 as the shell would find it; --python above all.
    const bool from_env = env.count(env::kPythonExec) > 0;
    const std::string py = !f.python.empty() ? f.python : from_env ? env.at(env::kPythonExec) : "python3";
    const std::string origin = !f.python.empty() ? "--python" : from_env ? "PYTHON_EXEC" : "python3 on PATH";
    absl::StatusOr<std::string> exe = host.FindExecutable(py);
    if (!exe.ok()) {
      return Bad(absl::StrCat("Python interpreter (", origin, "): ", exe.status().message(),
                              "; name one with --python PATH or PYTHON_EXEC"));
    }
    a.executable = *exe;
    a.interpreter_note = absl::StrCat("the workers' Python was ", *exe, " (", origin,
                                      "); another (a venv's bin/python): --python PATH or PYTHON_EXEC");
    a.argv = {py, "-u"};
    if (f.module) a.argv.push_back("-m");
    a.argv.push_back(program);
  }
  a.script_args_at = a.argv.size();  // torch.distributed.launch puts --local-rank=N here
  a.argv.insert(a.argv.end(), args.begin(), args.end());
  return absl::OkStatus();
}

absl::Status FillAgentOptions(const RawFlags& f, const std::map<std::string, std::string>& env,
                              const HostProbe& host, LaunchConfig& c) {
  AgentOptions& a = c.agent;
  DT_ASSIGN_OR_RETURN(auto nodes, ParseNnodes(f.nnodes));
  std::tie(c.min_nodes, c.max_nodes) = nodes;
  DT_ASSIGN_OR_RETURN(NprocPerNode nproc, ParseNprocPerNode(f.nproc, host, env));
  if (nproc.count > kMaxNprocPerNode) {
    return Bad(absl::StrCat("--nproc-per-node ", nproc.count, " is more than ", kMaxNprocPerNode,
                            " workers on one node; use at most one per GPU or core"));
  }
  a.nproc_per_node = nproc.count;
  if (!nproc.counted.empty()) c.notes.push_back(nproc.counted);
  if (f.node_rank < 0 || f.node_rank >= c.max_nodes) {
    return Bad(absl::StrCat("--node-rank ", f.node_rank, " is out of range for --nnodes ", f.nnodes,
                            "; use 0..", c.max_nodes - 1));
  }
  a.node_rank = f.node_rank;
  if (f.max_restarts < 0) return Bad("--max-restarts must be >= 0");
  if (f.master_port < 0 || f.master_port > 65535) {
    return Bad(absl::StrCat("--master-port ", f.master_port, " is not a port; use 1..65535"));
  }
  if (!std::isfinite(f.shutdown_timeout) || f.shutdown_timeout < 0 || f.shutdown_timeout > 86400) {
    return Bad(absl::StrCat("--shutdown-timeout ", f.shutdown_timeout, ": expected seconds between 0 and 86400"));
  }
  a.max_restarts = f.max_restarts;
  a.role = f.role;
  a.virtual_local_rank = f.virtual_local_rank;
  if (auto file = env.find(env::kErrorFile); file != env.end()) a.launcher_error_file = file->second;
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--numa-binding", &f.numa_binding},
                                    {"--duplicate-stdout-filters", &f.duplicate_stdout_filters},
                                    {"--duplicate-stderr-filters", &f.duplicate_stderr_filters}}) {
    if (!value->empty()) c.notes.push_back(absl::StrCat(flag, " ", *value, ": accepted, not applied (docs/MIGRATING.md)"));
  }
  a.local_addr = f.local_addr;
  if (!a.local_addr.empty()) {
    std::optional<std::string> ifname = host.InterfaceWithAddress(a.local_addr);
    if (!ifname) {
      return Bad(absl::StrCat("--local-addr ", a.local_addr, " is not an address of this host; "
                              "give one of its interface addresses"));
    }
    a.socket_ifname = *ifname;
  }
  a.shutdown_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000));
  absl::StatusOr<std::vector<int>> signals = ParseSignalList(f.signals);
  if (!signals.ok()) return Bad(absl::StrCat("--signals-to-handle: ", signals.status().message()));
  for (int sig : *signals) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
      return Bad(absl::StrCat("--signals-to-handle: ", SignalName(sig),
                              sig == SIGCHLD ? " is dtrun's own (worker exits)" : " cannot be caught",
                              "; list signals such as SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"));
    }
  }
  a.signals_to_handle = *signals;
  for (auto [flag, value, out] : {std::make_tuple("--redirects", &f.redirects, &a.redirects),
                                  std::make_tuple("--tee", &f.tee, &a.tee)}) {
    DT_ASSIGN_OR_RETURN(auto spec, ParseStreamSpec(flag, *value, a.nproc_per_node));
    *out = spec;
  }
  if (!f.ranks_filter.empty()) {
    std::set<int> ranks;
    for (absl::string_view r : absl::StrSplit(f.ranks_filter, ',', absl::SkipWhitespace())) {
      int v = 0;
      if (!absl::SimpleAtoi(r, &v) || v < 0 || v >= a.nproc_per_node) {
        return Bad(absl::StrCat("--local-ranks-filter: '", r, "' is not a local rank 0..", a.nproc_per_node - 1));
      }
      ranks.insert(v);
    }
    a.console_ranks = ranks;
  }
  // Given but empty (flag or environment) means no prefix at all, for output that is parsed.
  if (f.prefix_template_given) {
    a.log_line_prefix_template = f.prefix_template;
  } else if (auto it = env.find(env::kLogLinePrefixTemplate); it != env.end()) {
    a.log_line_prefix_template = it->second;
  }
  if (f.append_local_rank) a.local_rank_arg = f.local_rank_flag;
  a.event_log = f.event_log;
  DT_RETURN_IF_ERROR(FillHangOptions(f, a));
  DT_RETURN_IF_ERROR(FillStatusOptions(f, a));
  DT_RETURN_IF_ERROR(FillSnapshotOptions(f, a));
  DT_ASSIGN_OR_RETURN(auto conf, ParseRdzvConf(f.rdzv_conf));
  c.rdzv_conf = conf;
  rdzv::RendezvousOptions checked;  // every key and value is checked, single-node jobs too
  std::vector<std::string> ignored;
  DT_RETURN_IF_ERROR(rdzv::ApplyRdzvConf(c.rdzv_conf, checked, &ignored));
  if (!ignored.empty()) {
    c.notes.push_back(absl::StrCat("--rdzv-conf ", absl::StrJoin(ignored, ", "), ": ignored (dtrun's rendezvous reads "
                                   "join_timeout, last_call_timeout, close_timeout, keep_alive_interval, "
                                   "keep_alive_max_attempt, heartbeat_timeout, read_timeout, exit_barrier_timeout, "
                                   "timeout, is_host)"));
  }
  return absl::OkStatus();
}

// Where the workers' store lives and what they are told (single node), or which rendezvous
// service this node joins and whether it hosts it (multi-node).
absl::Status FillRendezvous(const RawFlags& f, const HostProbe& host, LaunchConfig& c) {
  AgentOptions& a = c.agent;
  c.rdzv_backend = f.rdzv_backend;
  c.rdzv_endpoint = f.rdzv_endpoint;
  a.run_id = f.rdzv_id;
  // "[::1]" as torchrun users write IPv6 addresses: the address itself for the store and workers.
  a.master_addr = f.master_addr.size() > 2 && f.master_addr.front() == '[' && f.master_addr.back() == ']'
                      ? f.master_addr.substr(1, f.master_addr.size() - 2)
                      : f.master_addr;
  a.master_port = f.master_port;
  if (f.on_straggler != "warn" && f.on_straggler != "replace") {
    return Bad(absl::StrCat("--on-straggler ", f.on_straggler, " is not warn or replace"));
  }
  if (f.on_straggler == "replace" && (f.rdzv_backend != "c10d" || c.max_nodes < 2)) {
    return Bad("--on-straggler replace needs an elastic multi-node job (--rdzv-backend c10d, --nnodes MIN:MAX) "
               "with a spare node to swap in; use warn");
  }
  if (f.rdzv_backend != "static" && f.rdzv_backend != "c10d") {
    return Bad(absl::StrCat("--rdzv-backend ", f.rdzv_backend, " is not supported; use c10d (dtrun's rendezvous "
                            "service) or static"));
  }
  if (f.standalone && c.max_nodes > 1) {
    return Bad(absl::StrCat("--standalone runs one node, but --nnodes is ", f.nnodes,
                            "; drop --standalone for a multi-node job"));
  }
  // --standalone, and (as torchrun since PR #175699) a single-node job that did not say where its
  // workers meet: a kernel-chosen port, so two jobs on one host never collide (--standalone also
  // gets a fresh run id). Workers see torchrun's "localhost"; the store listens on loopback only.
  if (f.standalone || (c.max_nodes == 1 && !f.meeting_point_given)) {
    c.topology = f.standalone ? Topology::kStandalone : Topology::kSingleNode;
    if (f.standalone) a.run_id = FreshRunId();
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    a.master_addr = "localhost";
    a.store_bind_addr = "127.0.0.1";
    a.master_port = 0;
    return absl::OkStatus();
  }
  c.topology = c.max_nodes > 1 ? Topology::kJoinService : Topology::kSingleNode;
  const bool dynamic = c.rdzv_backend != "static";
  if (!dynamic && !f.rdzv_endpoint.empty()) {
    // As torchrun: with the static backend the endpoint is the master's address and port
    // (PyTorch's own examples launch this way).
    DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, f.master_port));
    std::tie(a.master_addr, a.master_port) = ep;
  }
  if (!c.multi_node()) {
    if (dynamic && !f.rdzv_endpoint.empty()) {
      DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, 29400));
      std::tie(a.master_addr, a.master_port) = ep;
    }
    return absl::OkStatus();
  }
  rdzv::RendezvousOptions& r = c.rdzv;
  r.replace_stragglers = f.on_straggler == "replace";
  r.min_nodes = c.min_nodes;
  r.max_nodes = c.max_nodes;
  r.static_ranks = !dynamic;
  r.max_restarts = a.max_restarts;
  r.run_id = a.run_id;
  DT_RETURN_IF_ERROR(rdzv::ApplyRdzvConf(c.rdzv_conf, r));
  if (!dynamic && c.min_nodes != c.max_nodes) {
    return Bad(absl::StrCat("--nnodes ", f.nnodes, " is elastic; use --rdzv-backend c10d with --rdzv-endpoint"));
  }
  if (dynamic) {
    if (f.rdzv_endpoint.empty()) return Bad("--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]");
    DT_ASSIGN_OR_RETURN(auto ep, ParseEndpoint(f.rdzv_endpoint, 29400));
    std::tie(c.service_host, c.service_port) = ep;
    auto is_host = c.rdzv_conf.find("is_host");
    if (is_host != c.rdzv_conf.end()) {
      if (is_host->second == "1" || is_host->second == "true" || is_host->second == "True") {
        c.topology = Topology::kHostService;
      }
    } else if (host.IsThisHost(c.service_host)) {
      c.topology = Topology::kHostIfFree;  // as torchrun: the first local agent to bind it hosts
    }
  } else {
    c.service_host = a.master_addr;
    c.service_port = a.master_port;
    if (f.node_rank == 0) c.topology = Topology::kHostService;
  }
  if (c.service_port == 0) {
    return Bad(absl::StrCat("a multi-node job needs a fixed port that every node can reach; give ",
                            dynamic ? "--rdzv-endpoint HOST:PORT" : "--master-port", " a port other than 0"));
  }
  if (a.local_addr.empty()) {
    // A name that does not resolve yet (a Kubernetes service before its pod is up) is waited for
    // at launch, up to join_timeout (AwaitRendezvousHost).
    if (std::optional<std::string> local = host.LocalAddressFacing(c.service_host, c.service_port)) {
      a.local_addr = *local;
      a.socket_ifname = host.InterfaceWithAddress(a.local_addr).value_or("");
    }
  }
  c.credential_flags = f.credentials;  // read by LoadLaunchCredentials, after parsing
  return absl::OkStatus();
}

}  // namespace

namespace {

// Where the token's value is in `args`: (index, offset) — the word after --rdzv-token, or the
// part after '=' in --rdzv-token=X. Nothing after "--" is dtrun's.
std::vector<std::pair<size_t, size_t>> TokenValues(const std::vector<std::string_view>& args) {
  std::vector<std::pair<size_t, size_t>> at;
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    std::string_view a = args[i];
    if (a == "--rdzv-token" || a == "--rdzv_token") {
      if (i + 1 < args.size()) at.emplace_back(++i, 0);
    } else if (a.rfind("--rdzv-token=", 0) == 0 || a.rfind("--rdzv_token=", 0) == 0) {
      at.emplace_back(i, a.find('=') + 1);
    }
  }
  return at;
}

}  // namespace

absl::Status LoadLaunchCredentials(LaunchConfig& config) {
  if (!config.multi_node()) return absl::OkStatus();
  DT_ASSIGN_OR_RETURN(Credentials creds, LoadCredentials(config.credential_flags));
  config.rdzv.token = creds.token;
  config.tls = std::move(creds.tls);
  return absl::OkStatus();
}

std::string RedactedCommandLine(const std::vector<std::string>& args) {
  std::vector<std::string> shown = args;
  for (auto [i, offset] : TokenValues({args.begin(), args.end()})) shown[i] = shown[i].substr(0, offset) + "***";
  return absl::StrJoin(shown, " ");
}

bool HideTokenInArgv(int argc, char** argv) {
  std::vector<std::pair<size_t, size_t>> at = TokenValues({argv + 1, argv + argc});
  for (auto [i, offset] : at) {
    char* value = argv[i + 1] + offset;
    std::memset(value, '*', std::strlen(value));
  }
  return !at.empty();
}

absl::StatusOr<std::pair<int, int>> ParseNnodes(const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  int lo = 0, hi = 0;
  bool ok = parts.size() == 1 ? absl::SimpleAtoi(parts[0], &lo) && (hi = lo, true)
            : parts.size() == 2 ? absl::SimpleAtoi(parts[0], &lo) && absl::SimpleAtoi(parts[1], &hi)
                                : false;
  if (!ok || lo < 1) return Bad(absl::StrCat("--nnodes '", value, "': expected N or MIN:MAX with N >= 1"));
  if (lo > hi) return Bad(absl::StrCat("--nnodes '", value, "': MIN (", lo, ") is greater than MAX (", hi, ")"));
  return std::make_pair(lo, hi);
}

absl::StatusOr<NprocPerNode> ParseNprocPerNode(const std::string& value, const HostProbe& host,
                                               const std::map<std::string, std::string>& env) {
  int n = 0;
  if (absl::SimpleAtoi(value, &n)) {
    if (n >= 1) return NprocPerNode{n, ""};
    return Bad(absl::StrCat("--nproc-per-node '", value, "': expected a positive integer, cpu, gpu, cuda, xpu or auto"));
  }
  auto said = [&](int count, const std::string& what) {
    return NprocPerNode{count, absl::StrCat("--nproc-per-node ", value, ": ", count, " (", what, ")")};
  };
  const bool gpu = value == "gpu" || value == "cuda";
  if (value == "cpu") return said(host.CpuCount(), "this host's cores");
  if (!gpu && value != "xpu" && value != "auto") {
    return Bad(absl::StrCat("--nproc-per-node '", value, "': expected a positive integer, cpu, gpu, cuda, xpu or auto"));
  }
  const AcceleratorInventory inventory = host.Accelerators();
  // PyTorch's "cuda" devices are NVIDIA's, or AMD's under ROCm.
  std::vector<DeviceKind> kinds;
  if (gpu || value == "auto") {
    kinds.push_back(inventory.nvidia_uuids.empty() && inventory.amd_gpus > 0 ? DeviceKind::kAmd : DeviceKind::kNvidia);
  }
  if (value == "xpu" || value == "auto") kinds.push_back(DeviceKind::kIntel);
  std::vector<std::string> looked;
  for (DeviceKind kind : kinds) {
    DeviceCount devices = CountVisibleDevices(kind, inventory, env);
    if (devices.count > 0) return said(devices.count, devices.source);
    looked.push_back(devices.source);
  }
  if (value == "auto") return said(host.CpuCount(), absl::StrCat("no accelerator visible: ", absl::StrJoin(looked, "; "), "; so this host's cores"));
  return Bad(absl::StrCat("--nproc-per-node ", value, ": no device visible to the workers (", absl::StrJoin(looked, "; "),
                          "); give a number, or cpu"));
}

absl::StatusOr<std::map<int, StreamMask>> ParseStreamSpec(const std::string& flag,
                                                          const std::string& value, int nproc) {
  std::map<int, StreamMask> out;
  auto bad = [&] {
    return Bad(absl::StrCat(flag, " '", value, "': expected 0-3 (1=stdout, 2=stderr, 3=both) or "
                            "local_rank:mask,... such as 0:1,1:3"));
  };
  int mask = 0;
  if (absl::SimpleAtoi(value, &mask)) {
    if (mask < 0 || mask > 3) return bad();
    for (int r = 0; r < nproc; ++r) out[r] = mask;
    return out;
  }
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int rank = 0;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || !absl::SimpleAtoi(kv[1], &mask) ||
        mask < 0 || mask > 3 || rank < 0) {
      return bad();
    }
    out[rank] = mask;
  }
  return out;
}

absl::StatusOr<std::pair<std::string, int>> ParseEndpoint(const std::string& value, int default_port) {
  std::string host = value;
  std::string port_str;
  if (!value.empty() && value[0] == '[') {
    size_t close = value.find(']');
    if (close == std::string::npos) return Bad(absl::StrCat("endpoint '", value, "': missing ']'"));
    host = value.substr(1, close - 1);
    if (close + 1 < value.size() && value[close + 1] == ':') port_str = value.substr(close + 2);
  } else if (size_t colon = value.rfind(':'); colon != std::string::npos && value.find(':') == colon) {
    host = value.substr(0, colon);
    port_str = value.substr(colon + 1);
  }
  int port = default_port;
  if (!port_str.empty() && (!absl::SimpleAtoi(port_str, &port) || port < 0 || port > 65535)) {
    return Bad(absl::StrCat("endpoint '", value, "': '", port_str, "' is not a port"));
  }
  if (host.empty()) return Bad(absl::StrCat("endpoint '", value, "': missing host"));
  return std::make_pair(host, port);
}

absl::StatusOr<std::map<std::string, std::chrono::milliseconds>> ParseSectionTimeouts(const std::string& value) {
  std::map<std::string, std::chrono::milliseconds> out;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double seconds = 0;
    bool name_ok = kv.size() == 2 && progress::IsValidSectionName(kv[0]);
    if (!name_ok || !absl::SimpleAtod(kv[1], &seconds) || !std::isfinite(seconds) || seconds <= 0 ||
        seconds > 7 * 86400) {
      return Bad(absl::StrCat("--section-timeout: '", item, "' is not NAME=SECONDS (a section name of "
                              "A-Z a-z 0-9 _ . : - and seconds up to 604800), e.g. step=60,checkpoint=900"));
    }
    out[kv[0]] = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseRdzvConf(const std::string& value) {
  std::map<std::string, std::string> out;
  for (absl::string_view item : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return Bad(absl::StrCat("--rdzv-conf: '", item, "' is not key=value"));
    }
    out[kv[0]] = kv[1];
  }
  return out;
}

void AcceptOperatorSpellings() {
  const char* operator_spelling = std::getenv("PET_N_PROC_PER_NODE");
  if (operator_spelling && *operator_spelling && !std::getenv("PET_NPROC_PER_NODE")) {
    ::setenv("PET_NPROC_PER_NODE", operator_spelling, 0);
  }
}

std::vector<CliOption> LaunchFlags() { return DescribeCommand("dtrun", "dtrun", &DefineFlags); }

absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                                   const std::map<std::string, std::string>& env,
                                                   const HostProbe& host) {
  CLI::App app("dtrun: launch distributed PyTorch training (torchrun-compatible)", "dtrun");
  app.footer(absl::StrCat("Usage: ", kUsage, "\nPROGRAM and its ARGS are passed to every worker untouched.\n"
                          "Subcommands: dtrun status | dtrun kill --run-id ID | dtrun kill --all | dtrun rdzv-server | "
                          "dtrun completion bash|zsh"));
  app.prefix_command();
  RawFlags f;
  DefineFlags(app, f);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ParsedCommandLine parsed;
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    parsed.exit_text = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    return Bad(absl::StrCat(e.what(), "; run dtrun --help"));
  }
  f.prefix_template_given = app.get_option("--log-line-prefix-template")->count() > 0;
  for (const char* flag : {"--master-addr", "--master-port", "--rdzv-endpoint", "--rdzv-backend"}) {
    f.meeting_point_given = f.meeting_point_given || app.get_option(flag)->count() > 0;
  }
  DT_RETURN_IF_ERROR(ApplyTorchElasticEnvironment(app, env, f));
  if (f.version) {
    parsed.exit_text = VersionText("dtrun") + "\n";
    return parsed;
  }
  LaunchConfig c;
  DT_ASSIGN_OR_RETURN(std::string slurm, ApplySlurmLaunch(app, env, f));
  c.scheduler_note = slurm;
  DT_RETURN_IF_ERROR(FillAgentOptions(f, env, host, c));
  DT_RETURN_IF_ERROR(FillRendezvous(f, host, c));
  DT_RETURN_IF_ERROR(ResolveProgram(f, app.remaining(), env, host, c.agent));
  c.log_dir = f.log_dir;
  c.omp_warning = c.agent.nproc_per_node > 1 && !env.count(env::kOmpNumThreads);
  c.agent.set_omp_num_threads = c.omp_warning;
  c.agent.launch_id = absl::StrCat(::getpid(), "-", RandomHex(8));  // this process's launch
  parsed.config = std::move(c);
  return parsed;
}

}  // namespace dtrun
