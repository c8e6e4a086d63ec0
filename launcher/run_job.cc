#include "launcher/run_job.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/agent.h"
#include "agent/launch_guard.h"
#include "agent/run_registry.h"
#include "agent/snapshot_dir.h"
#include "agent/tcp_store_server.h"
#include "base/endpoint.h"
#include "base/env_names.h"
#include "base/executable.h"
#include "base/host_name.h"
#include "base/launch_layout.h"
#include "base/random_hex.h"
#include "base/status_macros.h"
#include "launcher/host_probe.h"
#include "launcher/rendezvous_host.h"
#include "rendezvous/grpc_module.h"
#include "rendezvous/round_source.h"
#include "snapshot/snapshot_region.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

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

// The `dtrun` Python module next to this binary (<prefix>/lib/dtrun/python), or "".
std::string PythonModuleDir() {
  const std::string exe = RunningExecutable();
  if (exe.empty()) return "";
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::path(exe).parent_path().parent_path() / "lib" / "dtrun" / "python";
  return std::filesystem::exists(dir / "dtrun" / "__init__.py", ec) ? dir.string() : "";
}

// Progress reports, FileTimers and where workers' stacks go, in the launch's private dir.
void SetUpProgressChannels(const std::map<std::string, std::string>& env, const std::string& private_dir,
                           AgentOptions& a) {
  a.progress_dir = private_dir;
  a.python_dir = PythonModuleDir();
  a.xxhash_library = snapshot::XxhashLibraryFile();
  // torchrun's switch: the agent serves a FileTimer pipe and tells workers where it is.
  auto enabled = env.find(env::kEnableFileTimer);
  if (enabled != env.end() && enabled->second == "1") {
    auto file = env.find(env::kTimerFile);
    a.timer_file = file != env.end() && !file->second.empty() ? file->second : launch_layout::TimerFile(private_dir);
  }
}

bool WantsLogFiles(const AgentOptions& a) {
  // Stacks of a hung job must outlive dtrun.
  if (a.hang.enabled()) return true;
  for (const auto* spec : {&a.redirects, &a.tee}) {
    for (const auto& [rank, mask] : *spec) {
      if (mask != 0) return true;
    }
  }
  return false;
}

// A single-node job: the workers' store on the declared (or a free) port, rounds in-process.
absl::StatusOr<int> RunLocalAgent(const LaunchConfig& config, const AttemptPaths& paths,
                                  const std::map<std::string, std::string>& env, const StdioWriters& stdio) {
  const AgentOptions& a = config.agent;
  std::string bind = a.store_bind_addr.empty() ? a.master_addr : a.store_bind_addr;
  DT_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> store,
                      TcpStoreServer::Start(bind, static_cast<uint16_t>(a.master_port)));
  auto rounds =
      std::make_unique<rdzv::LocalRoundSource>(a.max_restarts, a.nproc_per_node, a.master_addr, store->port());
  return Agent(a, paths, env, std::move(rounds), stdio).Run();
}

// The copies this node keeps for the node before it (agent/replicator.h); null without buddy copies.
std::shared_ptr<replica::ReplicaKeeper> BuddyKeeper(const AgentOptions& a) {
  if (a.snapshot_bytes_per_worker == 0 || a.snapshot_buddy_every == 0) return nullptr;
  const uint64_t cap = a.snapshot_bytes_per_worker / 2;  // one slot of a worker's region
  // Copies for up to twice this node's ranks (a buddy may have more workers), two each.
  return std::make_shared<replica::ReplicaKeeper>(snapshot::JobHash(a.run_id), cap, std::max(2 * a.nproc_per_node, 8));
}

// The node that hosts the rendezvous serves the workers' store and the gRPC service on the one
// declared port (launcher/rendezvous_host.h). The service also serves this node's buddy copies
// (`copies`, if any). Returns the store (null if another local agent already holds the port and
// this one may join it instead) and the service.
absl::Status HostRendezvous(const LaunchConfig& config, const rdzv::GrpcModuleApi& grpc,
                            const std::shared_ptr<replica::ReplicaKeeper>& copies,
                            std::unique_ptr<TcpStoreServer>& store, std::unique_ptr<rdzv::RendezvousServer>& server) {
  absl::StatusOr<HostedRendezvous> hosted =
      HostRendezvousWithStore(grpc, config.service_host, config.service_port, config.rdzv, config.tls, copies);
  if (!hosted.ok()) {
    // Only the store's bind fails this way; the service itself binds a free loopback port.
    if (config.topology == Topology::kHostIfFree && absl::IsUnavailable(hosted.status())) return absl::OkStatus();
    return hosted.status();
  }
  store = std::move(hosted->store);
  server = std::move(hosted->service);
  spdlog::info(
      "hosting the rendezvous and the workers' store (up to {} workers: half the open-file limit) for run {} "
      "on {}:{}",
      store->max_connections(), config.agent.run_id, config.service_host, store->port());
  return absl::OkStatus();
}

// Buddy copies of in-memory snapshots (agent/replicator.h): this node keeps copies for the node
// before it, with the job's token and TLS files. They are served on the declared port's number, so
// that a firewall which opens that one port between nodes lets them through: by the rendezvous
// service on the node that hosts it (`hosted`), on this node's own address elsewhere. On any free
// port where that one is taken (another job's), or on the rendezvous host's machine (several nodes
// on one host: the node that hosts the service may not have bound it yet). Sets `node`'s replica
// endpoint.
std::optional<BuddyReplication> ServeBuddyCopies(const LaunchConfig& config, const rdzv::GrpcModuleApi& grpc,
                                                 const rdzv::ClientOptions& job,
                                                 std::shared_ptr<replica::ReplicaKeeper> keeper, bool hosted,
                                                 rdzv::NodeInfo& node) {
  const AgentOptions& a = config.agent;
  if (!keeper) return std::nullopt;
  BuddyReplication r;
  if (hosted) {
    node.replica_addr = config.service_host;
    node.replica_port = config.service_port;
  } else {
    // Several nodes on the rendezvous host's machine: the port is the host's, bound or not yet.
    const int port = ThisHost().IsThisHost(config.service_host) ? 0 : config.service_port;
    absl::StatusOr<std::unique_ptr<replica::ReplicaServer>> server =
        grpc.start_replica_server(a.local_addr, port, job, keeper);
    if (!server.ok() && port != 0) {
      server = grpc.start_replica_server(a.local_addr, 0, job, keeper);
      if (server.ok()) {
        spdlog::info(
            "buddy copies are served on port {}, as port {} is taken on {}: a firewall between nodes must "
            "open port {} too",
            (*server)->port(), port, a.local_addr, (*server)->port());
      }
    }
    if (!server.ok()) {
      spdlog::warn("{}; training without buddy copies (a lost node's ranks restore from disk)",
                   std::string(server.status().message()));
      return std::nullopt;
    }
    node.replica_addr = a.local_addr;
    node.replica_port = (*server)->port();
    r.server = std::move(*server);
  }
  r.keeper = std::move(keeper);
  const uint64_t job_hash = r.keeper->job(), cap = r.keeper->max_payload_bytes();
  r.connect = [&grpc, job, cap, job_hash](const std::string& host, int port) {
    return grpc.connect_buddy(host, port, job, job_hash, cap);
  };
  r.every = a.snapshot_buddy_every;
  r.failure_domain = a.failure_domain;
  return r;
}

// The rendezvous a node with a static rank joins, as its registry entry names it.
std::string ServiceOf(const LaunchConfig& config) {
  return absl::StrCat(config.service_host, ":", config.service_port);
}

// Starts this node's store and round source (the rendezvous service, hosted here if this node
// hosts it), then runs the agent.
absl::StatusOr<int> RunAgent(const LaunchConfig& config, const AttemptPaths& paths,
                             const std::map<std::string, std::string>& env, const StdioWriters& stdio) {
  if (!config.multi_node()) return RunLocalAgent(config, paths, env, stdio);
  const AgentOptions& a = config.agent;
  DT_ASSIGN_OR_RETURN(const rdzv::GrpcModuleApi* grpc, rdzv::LoadGrpcModule());
  // The service before the store: the store's thread hands it connections, so the store goes first.
  std::unique_ptr<rdzv::RendezvousServer> server;
  std::unique_ptr<TcpStoreServer> store;
  std::shared_ptr<replica::ReplicaKeeper> keeper = BuddyKeeper(a);
  // Only here: the workers' store is on the service's endpoint, wherever that runs.
  if (config.hosts_service()) DT_RETURN_IF_ERROR(HostRendezvous(config, *grpc, keeper, store, server));
  rdzv::ClientOptions copts;
  copts.endpoint = FormatEndpoint(config.service_host, config.service_port);
  copts.run_id = a.run_id;
  copts.token = config.rdzv.token;
  copts.tls = config.tls;
  // Elastic: the service takes --node-rank, when given, as a preference for a round's order.
  rdzv::NodeInfo node{LocalHostName(),
                      a.nproc_per_node,
                      a.local_addr,
                      store ? store->port() : 0,
                      config.rdzv.static_ranks ? a.node_rank : a.rank_hint,
                      "",
                      0};
  // No other agent of this node alive here (static: of its rank; elastic: of the run): one the
  // service holds at this address is this node's earlier agent, dead (killed, restarted by a
  // supervisor), and need not be waited out.
  node.failure_domain = a.failure_domain;
  node.predecessor_dead =
      !AnotherLaunchRunsNode(a.run_id, ServiceOf(config), config.rdzv.static_ranks ? a.node_rank : -1);
  std::optional<BuddyReplication> replication =
      ServeBuddyCopies(config, *grpc, copts, std::move(keeper), server != nullptr, node);
  DT_ASSIGN_OR_RETURN(
      std::unique_ptr<rdzv::RoundSource> rounds,
      grpc->start_round_source(copts, node, std::chrono::steady_clock::now() + config.rdzv.join_timeout));
  AgentOptions with_endpoint = a;
  with_endpoint.rdzv_endpoint = copts.endpoint;
  Agent agent(std::move(with_endpoint), paths, env, std::move(rounds), stdio);
  if (replication) agent.SetReplication(std::move(*replication));
  int rc = agent.Run();
  // Let the other nodes learn the outcome before the service (and the port it shares with the
  // store) goes; not after an interrupt, when they are told by the service's absence.
  if (server && rc < 128) server->AwaitNodesLeft(std::chrono::seconds(10));
  return rc;
}

// A rendezvous host whose name does not resolve yet (a Kubernetes service resolves once its pod is
// up) is looked up again, backing off to 2 s, until join_timeout; a handled signal (blocked, so
// waited for here) ends the wait. Returns 0 once this node's address facing it is known, or 128 +
// the signal that ended the wait.
absl::StatusOr<int> AwaitRendezvousHost(LaunchConfig& config) {
  AgentOptions& a = config.agent;
  const auto deadline = std::chrono::steady_clock::now() + config.rdzv.join_timeout;
  sigset_t handled;
  sigemptyset(&handled);
  for (int signo : a.signals_to_handle) sigaddset(&handled, signo);
  auto pause = std::chrono::milliseconds(100);
  for (bool said = false;;) {
    if (std::optional<std::string> local = ThisHost().LocalAddressFacing(config.service_host, config.service_port)) {
      a.local_addr = *local;
      a.socket_ifname = ThisHost().InterfaceWithAddress(*local).value_or("");
      if (said) spdlog::info("the rendezvous host {} resolves now; this node's address is {}", config.service_host, *local);
      return 0;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("cannot reach the rendezvous host ", config.service_host, " within join_timeout (",
                       config.rdzv.join_timeout.count() / 1000.0,
                       " s); check --master-addr / --rdzv-endpoint, or give this node's address with --local-addr"));
    }
    if (!said) {
      spdlog::warn("the rendezvous host {} does not resolve (or is unreachable) yet; waiting up to {} s (join_timeout): "
                   "a Kubernetes service name resolves once its pod is up",
                   config.service_host, left.count() / 1000.0);
      said = true;
    }
    const auto wait = std::min(pause, left);
    timespec ts{static_cast<time_t>(wait.count() / 1000), static_cast<long>(wait.count() % 1000) * 1000000};
    const int signo = ::sigtimedwait(&handled, nullptr, &ts);
    if (signo > 0) return 128 + signo;
    pause = std::min(pause * 2, std::chrono::milliseconds(2000));
  }
}

// $TMPDIR when it is an absolute path, else /tmp: where Python's tempfile, and so torchrun, put
// their logs.
std::string TempDirBase() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string base = tmpdir && tmpdir[0] == '/' ? tmpdir : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base;
}

// Where this launch's logs go: a fresh DIR/<run_id> under --log-dir; without it, when hang
// detection or --redirects/--tee need files, a private fresh directory in $TMPDIR or /tmp (never
// one another user placed there; the event log opens in it before any worker writes); else none ("").
absl::StatusOr<std::string> LogRootFor(const LaunchConfig& config) {
  const AgentOptions& a = config.agent;
  if (!config.log_dir.empty()) return FreshLogRoot(config.log_dir, a.run_id);
  if (!WantsLogFiles(a)) return std::string();
  const std::string base = TempDirBase();
  for (int tries = 0; tries < 8; ++tries) {
    std::string root = absl::StrCat(base, "/dtrun_", a.run_id, "_", RandomHex(6));
    if (::mkdir(root.c_str(), 0700) == 0) {
      spdlog::info("{} without --log-dir: logs go to {}", a.hang.enabled() ? "hang detection" : "--redirects/--tee",
                   root);
      return root;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cannot create a log directory in ", base, ": ", strerror(errno), "; give one with --log-dir"));
}

// This launch's entry in the registry `dtrun kill` and `dtrun status` read (and a restarted agent
// of the same node: RunAgent).
LaunchRecord RecordOf(const LaunchConfig& config, const std::string& command_line) {
  LaunchRecord record = RecordOfThisProcess(config.agent.launch_id, config.agent.run_id, command_line);
  record.nproc_per_node = config.agent.nproc_per_node;
  if (config.multi_node()) {
    record.node_rank = config.rdzv.static_ranks ? config.agent.node_rank : -1;
    record.service = ServiceOf(config);
  }
  return record;
}

// Everything after the launch's private directory exists: log paths, the registry entry and
// launch guard, then the agent.
absl::StatusOr<int> RunInLaunchDir(LaunchConfig& config, const std::map<std::string, std::string>& env,
                                   const std::string& command_line, const StdioWriters& stdio,
                                   const std::string& private_dir) {
  AgentOptions& a = config.agent;
  AttemptPaths paths;
  SetUpProgressChannels(env, private_dir, a);
  auto term = env.find("TERM");
  a.progress_line = a.progress_line && ::isatty(STDOUT_FILENO) && (term == env.end() || term->second != "dumb");
  DT_ASSIGN_OR_RETURN(paths.log_root, LogRootFor(config));
  if (!a.snapshot_dir.empty()) {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(a.snapshot_dir, ec);
    if (!ec) a.snapshot_dir = absolute.lexically_normal().string();
    DT_RETURN_IF_ERROR(SnapshotDir::Open(a.snapshot_dir).status());  // a bad one said before anything starts
  }
  paths.error_root = paths.log_root.empty() ? private_dir : paths.log_root;

  absl::StatusOr<std::string> registry_file = RegisterLaunch(RecordOf(config, command_line));
  if (!registry_file.ok()) {
    spdlog::warn("{}; `dtrun kill` will still find the workers", std::string(registry_file.status().message()));
  }
  LaunchGuard guard = LaunchGuard::Start(a.launch_id, registry_file.value_or(""));
  a.guard_pid = guard.pid();
  BlockAgentSignals(a.signals_to_handle);

  if (config.omp_warning) {
    spdlog::warn(
        "\n*****************************************\n"
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
        "your system being overloaded, please further tune the variable for optimal performance in "
        "your application as needed. \n*****************************************");
  }
  absl::StatusOr<int> rc = config.multi_node() && a.local_addr.empty() ? AwaitRendezvousHost(config) : 0;
  if (rc.ok() && *rc == 0) rc = RunAgent(config, paths, env, stdio);
  if (registry_file.ok()) ::unlink(registry_file->c_str());
  guard.Dismiss();
  return rc;
}

}  // namespace

absl::StatusOr<int> RunJob(LaunchConfig config, const std::map<std::string, std::string>& env,
                           const std::string& command_line, const StdioWriters& stdio) {
  const AgentOptions& a = config.agent;
  DT_ASSIGN_OR_RETURN(std::string runtime_dir, RuntimeDir());
  RemoveLeftoversOfGoneLaunches();  // crashed launches cannot clean up after themselves
  std::string private_dir = launch_layout::LaunchDir(runtime_dir, a.launch_id);
  if (::mkdir(private_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", private_dir, ": ", strerror(errno), "; check DTRUN_RUNTIME_DIR"));
  }
  absl::StatusOr<int> rc = RunInLaunchDir(config, env, command_line, stdio, private_dir);
  std::error_code ec;
  std::filesystem::remove_all(private_dir, ec);
  return rc;
}

}  // namespace dtrun
