#include "launcher/launch_config.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>
#include <tuple>

#include "CLI/CLI.hpp"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/snapshot_store.h"
#include "base/build_info.h"
#include "base/env_names.h"
#include "base/launch_layout.h"
#include "base/signal_names.h"
#include "base/status_macros.h"
#include "launcher/launch_flags.h"
#include "launcher/launch_topology.h"
#include "launcher/numa_binding.h"
#include "launcher/slurm_env.h"
#include "launcher/subcommand_cli.h"
#include "progress/report_protocol.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun {
namespace {

constexpr int kMaxNprocPerNode = 1024;

// A timeout flag in seconds: finite, 0 (off) or positive, at most a week.
absl::StatusOr<std::chrono::milliseconds> TimeoutFlag(const std::string& flag, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 7 * 86400) {
    return BadFlag(absl::StrCat(flag, " ", seconds, ": expected seconds between 0 (off) and 604800"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

absl::Status FillHangOptions(const RawFlags& f, AgentOptions& a) {
  DT_ASSIGN_OR_RETURN(std::chrono::milliseconds beat, TimeoutFlag("--heartbeat-timeout", f.heartbeat_timeout));
  if (beat.count() > 0) a.hang.heartbeat_timeout = beat;
  DT_ASSIGN_OR_RETURN(std::chrono::milliseconds teardown, TimeoutFlag("--teardown-timeout", f.teardown_timeout));
  a.hang.teardown_timeout = teardown.count() > 0 ? std::optional<std::chrono::milliseconds>(teardown) : std::nullopt;
  DT_ASSIGN_OR_RETURN(a.dstate_timeout, TimeoutFlag("--dstate-timeout", f.dstate_timeout));
  DT_ASSIGN_OR_RETURN(a.hang.section_timeouts, ParseSectionTimeouts(f.section_timeouts));
  if (f.max_attempts_without_progress < 0) {
    return BadFlag(absl::StrCat("--max-attempts-without-progress ", f.max_attempts_without_progress,
                            ": expected 0 (never) or a count of attempts"));
  }
  a.max_attempts_without_progress = f.max_attempts_without_progress;
  return absl::OkStatus();
}

// The rendezvous would refuse it at join: said here first.
absl::Status CheckFailureDomainFlag(const std::string& domain) {
  if (rdzv::IsFailureDomainName(domain)) return absl::OkStatus();
  return BadFlag(absl::StrCat("--failure-domain \"", absl::CHexEscape(domain.substr(0, 32)),
                              "\": expected a name of at most ", rdzv::kMaxFailureDomainBytes,
                              " printable characters without spaces, such as the node's rack or leaf switch"));
}

absl::Status FillSnapshotOptions(const RawFlags& f, AgentOptions& a) {
  if (f.snapshot_every < 0) {
    return BadFlag(absl::StrCat("--snapshot-every ", f.snapshot_every, ": expected 0 (adaptive) or a count of steps"));
  }
  a.snapshot_every = f.snapshot_every;
  if (f.snapshot_buddy_every < 0) {
    return BadFlag(absl::StrCat("--snapshot-buddy-every ", f.snapshot_buddy_every, ": expected 0 (off) or a count of steps"));
  }
  a.snapshot_buddy_every = f.snapshot_buddy_every;
  if (absl::Status domain = CheckFailureDomainFlag(f.failure_domain); !domain.ok()) return domain;
  a.failure_domain = f.failure_domain;
  if (f.warm_workers != "on" && f.warm_workers != "off") {
    return BadFlag(absl::StrCat("--warm-workers ", f.warm_workers.substr(0, 32), ": expected on or off"));
  }
  a.warm_workers = f.warm_workers == "on";
  a.snapshot_dir = f.snapshot_dir;
  if (!std::isfinite(f.snapshot_dir_every) || f.snapshot_dir_every < 0 || f.snapshot_dir_every > 86400) {
    return BadFlag(absl::StrCat("--snapshot-dir-every ", f.snapshot_dir_every,
                                ": expected seconds between 0 (only when the job ends) and 86400"));
  }
  a.snapshot_dir_every = std::chrono::milliseconds(static_cast<int64_t>(f.snapshot_dir_every * 1000));
  if (f.snapshot_memory == "auto") {
    a.snapshot_bytes_per_worker = DefaultSnapshotBytes(a.nproc_per_node);
    return absl::OkStatus();
  }
  int64_t mib = 0;
  constexpr int64_t kMaxMib = int64_t{1} << 30;  // 1 PiB
  const uint64_t min_mib = (snapshot::kMinRegionBytes + (1 << 20) - 1) >> 20;
  if (!absl::SimpleAtoi(f.snapshot_memory, &mib) || mib < 0 || mib > kMaxMib ||
      (mib > 0 && static_cast<uint64_t>(mib) < min_mib)) {
    return BadFlag(absl::StrCat("--snapshot-memory ", f.snapshot_memory, ": expected auto, 0 (off) or MiB from ",
                            min_mib, " to ", kMaxMib));
  }
  a.snapshot_bytes_per_worker = static_cast<uint64_t>(mib) << 20;
  if (mib == 0 && !f.snapshot_dir.empty()) {
    return BadFlag(absl::StrCat("--snapshot-dir ", f.snapshot_dir,
                                " keeps in-memory snapshots, and --snapshot-memory 0 turns them off; drop one of them"));
  }
  return absl::OkStatus();
}

absl::Status FillStatusOptions(const RawFlags& f, AgentOptions& a) {
  if (f.metrics_port > 65535 || f.metrics_port < -1) {
    return BadFlag(absl::StrCat("--metrics-port ", f.metrics_port, ": expected a port, 0 to 65535 (0: a free one)"));
  }
  if (f.metrics_port >= 0) a.metrics_port = f.metrics_port;
  if (!f.metrics_host.empty()) {
    in6_addr any;
    const int family = f.metrics_host.find(':') != std::string::npos ? AF_INET6 : AF_INET;
    if (::inet_pton(family, f.metrics_host.c_str(), &any) != 1) {
      return BadFlag(absl::StrCat("--metrics-host ", f.metrics_host, ": expected a numeric IPv4 or IPv6 address"));
    }
    if (!a.metrics_port) return BadFlag("--metrics-host needs --metrics-port");
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
      return BadFlag(absl::StrCat(env::kShutdownTimeout, "='", v->second, "': expected seconds, e.g. 120"));
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
  if (!read.ok()) return BadFlag(absl::StrCat("under Slurm: ", read.status().message()));
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
  f.node_rank_given = f.node_rank_given || (s.node_rank && !single);
  take("--node-rank", s.node_rank, f.node_rank, !single);
  take("--master-addr", s.master_addr, f.master_addr, !single);
  take("--master-port", s.master_port, f.master_port, !single);
  f.meeting_point_given = f.meeting_point_given || (s.master_port && !single);
  take("--rdzv-id", s.run_id, f.rdzv_id, !f.standalone);
  take("--nproc-per-node", nproc, f.nproc, true);
  take("--failure-domain", s.failure_domain, f.failure_domain, !single);
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
  if (rest.empty()) return BadFlag(absl::StrCat("missing the program to run; usage: ", kLaunchUsage));
  const std::string& program = rest[0];
  if (absl::StartsWith(program, "-") && program != "-") {
    return BadFlag(absl::StrCat("unknown option ", program, "; run dtrun --help for the list"));
  }
  if (f.module && f.no_python) return BadFlag("--module and --no-python cannot be used together; drop one");
  a.program_name = program;
  std::vector<std::string> args(rest.begin() + 1, rest.end());
  bool python = f.module || (!f.no_python && absl::EndsWith(program, ".py"));
  if (!python) {
    absl::StatusOr<std::string> exe = host.FindExecutable(program);
    if (!exe.ok()) return BadFlag(std::string(exe.status().message()));
    a.executable = *exe;
    a.argv = {program};
  } else {
    if (!f.module && !host.Readable(program)) {
      return BadFlag(absl::StrCat(program, ": no such file (or not readable)"));
    }
    // As torchrun: PYTHON_EXEC, else the interpreter dtrun runs under (`python -m dtrun` sets
    // PYTHON_EXEC to it), else python3 as the shell would find it; --python above all.
    const bool from_env = env.count(env::kPythonExec) > 0;
    const std::string py = !f.python.empty() ? f.python : from_env ? env.at(env::kPythonExec) : "python3";
    const std::string origin = !f.python.empty() ? "--python" : from_env ? "PYTHON_EXEC" : "python3 on PATH";
    absl::StatusOr<std::string> exe = host.FindExecutable(py);
    if (!exe.ok()) {
      return BadFlag(absl::StrCat("Python interpreter (", origin, "): ", exe.status().message(),
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

// The GPUs the workers will see, in their numbering (the visibility variables narrow and reorder):
// NVIDIA's, else AMD's under ROCm.
absl::StatusOr<std::vector<GpuSeat>> SeatsOfVisibleGpus(const AcceleratorInventory& inv,
                                                        const std::map<std::string, std::string>& env) {
  const DeviceKind kind = CudaDeviceKind(inv);
  const std::vector<PciGpu>& gpus = kind == DeviceKind::kAmd ? inv.amd : inv.nvidia;
  const VisibleGpus visible = FindVisibleGpus(kind, inv, env);
  std::vector<GpuSeat> seats;
  for (int i : visible.physical) {
    if (i < 0 || gpus[i].bus_id.empty()) {
      return BadFlag(absl::StrCat("--numa-binding: ", visible.source,
                                  " names a GPU whose PCI address the driver's files do not show (an NVIDIA MIG "
                                  "instance, or an AMD GPU by UUID); name the GPUs by index, or bind inside "
                                  "PROGRAM (numactl) instead"));
    }
    seats.push_back(GpuSeat{gpus[i].bus_id, gpus[i].numa_node});
  }
  return seats;
}

// --numa-binding: each local rank's CPUs, decided here from this machine's topology; said at launch.
absl::Status FillNumaBinding(const RawFlags& f, const std::map<std::string, std::string>& env, const HostProbe& host,
                             LaunchConfig& c) {
  if (f.numa_binding.empty()) return absl::OkStatus();
  absl::StatusOr<NumaMode> mode = ParseNumaMode(f.numa_binding);
  if (!mode.ok()) return BadFlag(std::string(mode.status().message()));
  DT_ASSIGN_OR_RETURN(std::vector<GpuSeat> gpus, SeatsOfVisibleGpus(host.Accelerators(), env));
  absl::StatusOr<std::vector<WorkerCpus>> plan = PlanNumaBinding(*mode, c.agent.nproc_per_node, host.Cpus(), gpus);
  if (!plan.ok()) return BadFlag(std::string(plan.status().message()));
  for (size_t r = 0; r < plan->size(); ++r) {
    const WorkerCpus& w = (*plan)[r];
    c.agent.worker_cpus.push_back(w.cpus);
    c.notes.push_back(absl::StrCat("--numa-binding ", f.numa_binding, ": local rank ", r, " on CPUs ",
                                   FormatCpuList(w.cpus), " (", w.where, ")"));
  }
  return absl::OkStatus();
}

absl::Status FillAgentOptions(const RawFlags& f, const std::map<std::string, std::string>& env,
                              const HostProbe& host, LaunchConfig& c) {
  AgentOptions& a = c.agent;
  DT_ASSIGN_OR_RETURN(auto nodes, ParseNnodes(f.nnodes));
  std::tie(c.min_nodes, c.max_nodes) = nodes;
  DT_ASSIGN_OR_RETURN(NprocPerNode nproc, ParseNprocPerNode(f.nproc, host, env));
  if (nproc.count > kMaxNprocPerNode) {
    return BadFlag(absl::StrCat("--nproc-per-node ", nproc.count, " is more than ", kMaxNprocPerNode,
                            " workers on one node; use at most one per GPU or core"));
  }
  a.nproc_per_node = nproc.count;
  if (!nproc.counted.empty()) c.notes.push_back(nproc.counted);
  if (f.node_rank < 0 || f.node_rank >= c.max_nodes) {
    return BadFlag(absl::StrCat("--node-rank ", f.node_rank, " is out of range for --nnodes ", f.nnodes,
                            "; use 0..", c.max_nodes - 1));
  }
  a.node_rank = f.node_rank;
  a.rank_hint = f.node_rank_given ? f.node_rank : -1;
  if (f.max_restarts < 0) return BadFlag("--max-restarts must be >= 0");
  if (f.master_port < 0 || f.master_port > 65535) {
    return BadFlag(absl::StrCat("--master-port ", f.master_port, " is not a port; use 1..65535"));
  }
  if (!std::isfinite(f.shutdown_timeout) || f.shutdown_timeout < 0 || f.shutdown_timeout > 86400) {
    return BadFlag(absl::StrCat("--shutdown-timeout ", f.shutdown_timeout, ": expected seconds between 0 and 86400"));
  }
  a.max_restarts = f.max_restarts;
  a.role = f.role;
  a.virtual_local_rank = f.virtual_local_rank;
  if (auto file = env.find(env::kErrorFile); file != env.end()) a.launcher_error_file = file->second;
  for (const auto& [flag, value, filters] :
       {std::tuple<const char*, const std::string*, std::vector<std::string>*>{
            "--duplicate-stdout-filters", &f.duplicate_stdout_filters, &a.duplicate_stdout_filters},
        {"--duplicate-stderr-filters", &f.duplicate_stderr_filters, &a.duplicate_stderr_filters}}) {
    if (value->empty()) continue;
    if (f.log_dir.empty()) {
      return BadFlag(absl::StrCat(flag, " copies matching lines into LOG_DIR/.../attempt_N/; give --log-dir DIR"));
    }
    *filters = absl::StrSplit(*value, ',', absl::SkipEmpty());
  }
  a.local_addr = f.local_addr;
  if (!a.local_addr.empty()) {
    std::optional<std::string> ifname = host.InterfaceWithAddress(a.local_addr);
    if (!ifname) {
      return BadFlag(absl::StrCat("--local-addr ", a.local_addr, " is not an address of this host; "
                              "give one of its interface addresses"));
    }
    a.socket_ifname = *ifname;
  }
  a.shutdown_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000));
  absl::StatusOr<std::vector<int>> signals = ParseSignalList(f.signals);
  if (!signals.ok()) return BadFlag(absl::StrCat("--signals-to-handle: ", signals.status().message()));
  for (int sig : *signals) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD) {
      return BadFlag(absl::StrCat("--signals-to-handle: ", SignalName(sig),
                              sig == SIGCHLD ? " is dtrun's own (worker exits)" : " cannot be caught",
                              "; list signals such as SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"));
    }
  }
  a.signals_to_handle = *signals;
  for (auto [flag, value, out] : {std::make_tuple("--redirects", &f.redirects, &a.redirects),
                                  std::make_tuple("--tee", &f.tee, &a.tee)}) {
    DT_ASSIGN_OR_RETURN(*out, ParseStreamSpec(flag, *value, a.nproc_per_node));
  }
  if (!f.ranks_filter.empty()) {
    std::set<int> ranks;
    for (absl::string_view r : absl::StrSplit(f.ranks_filter, ',', absl::SkipWhitespace())) {
      int v = 0;
      if (!absl::SimpleAtoi(r, &v) || v < 0 || v >= a.nproc_per_node) {
        return BadFlag(absl::StrCat("--local-ranks-filter: '", r, "' is not a local rank 0..", a.nproc_per_node - 1));
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
  DT_ASSIGN_OR_RETURN(c.rdzv_conf, ParseRdzvConf(f.rdzv_conf));
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

}  // namespace


absl::Status LoadLaunchCredentials(LaunchConfig& config) {
  if (!config.multi_node()) return absl::OkStatus();
  DT_ASSIGN_OR_RETURN(Credentials creds, LoadCredentials(config.credential_flags));
  config.rdzv.token = creds.token;
  config.tls = std::move(creds.tls);
  return absl::OkStatus();
}

void AcceptOperatorSpellings() {
  const char* operator_spelling = std::getenv("PET_N_PROC_PER_NODE");
  if (operator_spelling && *operator_spelling && !std::getenv("PET_NPROC_PER_NODE")) {
    ::setenv("PET_NPROC_PER_NODE", operator_spelling, 0);
  }
}

std::vector<CliOption> LaunchFlags() { return DescribeCommand("dtrun", "dtrun", &DefineLaunchFlags); }

absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                                   const std::map<std::string, std::string>& env,
                                                   const HostProbe& host) {
  CLI::App app("dtrun: launch distributed PyTorch training (torchrun-compatible)", "dtrun");
  app.footer(absl::StrCat("Usage: ", kLaunchUsage, "\nPROGRAM and its ARGS are passed to every worker untouched.\n"
                          "Subcommands: dtrun status | dtrun kill --run-id ID | dtrun kill --all | dtrun rdzv-server | "
                          "dtrun completion bash|zsh"));
  app.prefix_command();
  RawFlags f;
  DefineLaunchFlags(app, f);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  ParsedCommandLine parsed;
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    parsed.exit_text = app.help();
    return parsed;
  } catch (const CLI::ParseError& e) {
    return BadFlag(absl::StrCat(e.what(), "; run dtrun --help"));
  }
  f.prefix_template_given = app.get_option("--log-line-prefix-template")->count() > 0;
  f.node_rank_given = app.get_option("--node-rank")->count() > 0;
  for (const char* flag : {"--master-addr", "--master-port", "--rdzv-endpoint", "--rdzv-backend"}) {
    f.meeting_point_given = f.meeting_point_given || app.get_option(flag)->count() > 0;
  }
  DT_RETURN_IF_ERROR(ApplyTorchElasticEnvironment(app, env, f));
  if (f.version) {
    parsed.exit_text = VersionText("dtrun") + "\n";
    return parsed;
  }
  if (!f.hosts.empty() || !f.hostfile.empty()) {
    const size_t program_at = args.size() - app.remaining().size();
    if (app.remaining().empty()) return BadFlag(absl::StrCat("no PROGRAM given; usage: ", kLaunchUsage));
    DT_ASSIGN_OR_RETURN(parsed.ssh_launch,
                        PlanSshLaunch(f, app, {args, program_at, env, host.ThisExecutable(), host.WorkingDirectory()}));
    return parsed;
  }
  for (const char* flag : {"--ssh-command", "--remote-dtrun", "--env"}) {
    if (app.get_option(flag)->count() > 0) {
      return BadFlag(absl::StrCat(flag, " is for starting a job on several hosts; give the hosts with -H or --hostfile"));
    }
  }
  LaunchConfig c;
  DT_ASSIGN_OR_RETURN(c.scheduler_note, ApplySlurmLaunch(app, env, f));
  DT_RETURN_IF_ERROR(FillAgentOptions(f, env, host, c));
  DT_RETURN_IF_ERROR(FillNumaBinding(f, env, host, c));
  DT_RETURN_IF_ERROR(FillTopology(f, host, c));
  DT_RETURN_IF_ERROR(ResolveProgram(f, app.remaining(), env, host, c.agent));
  c.log_dir = f.log_dir;
  c.omp_warning = c.agent.nproc_per_node > 1 && !env.count(env::kOmpNumThreads);
  c.agent.set_omp_num_threads = c.omp_warning;
  c.agent.launch_id = launch_layout::NewLaunchId();
  parsed.config = std::move(c);
  return parsed;
}

}  // namespace dtrun
