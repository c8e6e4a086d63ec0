// The parsed and validated `dtrun` command line (torchrun-compatible).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "launcher/cli_option.h"
#include "launcher/credentials.h"
#include "launcher/host_probe.h"
#include "launcher/launch_values.h"
#include "launcher/ssh_launch_plan.h"
#include "rendezvous/rendezvous_options.h"
#include "rendezvous/rendezvous_server.h"

namespace dtrun {

// How this node takes part in the job, settled when the command line is parsed. Whether ranks are
// fixed (static) or given out each round (elastic) is rdzv.static_ranks, and what Slurm supplied is
// scheduler_note: neither changes where rounds come from.
enum class Topology {
  kStandalone,   // --standalone: one node, rounds in-process, a fresh run id, a free port
  kSingleNode,   // one node without --standalone: rounds in-process, the run id as given
  kHostService,  // several nodes; this one hosts the rendezvous service and the workers' store
  kHostIfFree,   // several nodes; the c10d endpoint is this host and is_host is unset: this node
                 // hosts unless another local agent holds the port already, then joins it
  kJoinService,  // several nodes; another node, or `dtrun rdzv-server`, hosts the service
};

struct LaunchConfig {
  Topology topology = Topology::kSingleNode;
  bool multi_node() const { return topology != Topology::kStandalone && topology != Topology::kSingleNode; }
  bool hosts_service() const { return topology == Topology::kHostService || topology == Topology::kHostIfFree; }

  AgentOptions agent;  // launch_id and run_id set (a fresh run id with --standalone)
  int min_nodes = 1;
  int max_nodes = 1;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::map<std::string, std::string> rdzv_conf;
  std::string log_dir;         // --log-dir as given

  // Multi-node: the rendezvous service this node joins (and hosts, if hosts_service()).
  std::string service_host;
  int service_port = 0;
  rdzv::RendezvousOptions rdzv;
  CredentialFlags credential_flags;  // as given; LoadLaunchCredentials reads the files
  rdzv::TlsCredentials tls;
  bool omp_warning = false;    // print torchrun's OMP_NUM_THREADS banner
  std::string scheduler_note;  // what was taken from Slurm's variables, said at start ("": none)
  // Said at start, one line each: what --nproc-per-node gpu|auto|... counted, --rdzv-conf keys
  // dtrun has no use for, torchrun flags accepted but not applied.
  std::vector<std::string> notes;
};

// Kubeflow's training-operator (pkg/controller.v1/pytorch/elastic.go) sets PET_N_PROC_PER_NODE,
// not torchrun's PET_NPROC_PER_NODE: the former is copied to the latter when only it is set.
// Call before parsing (the flags read PET_ variables from the process environment).
void AcceptOperatorSpellings();

// What parsing produced: a config to run, a launch over ssh on several hosts (-H, --hostfile),
// or text to print and exit 0 (--help, --version).
struct ParsedCommandLine {
  std::optional<LaunchConfig> config;
  std::optional<SshLaunch> ssh_launch;
  std::string exit_text;
};

// Parses `dtrun [options] PROGRAM [ARGS...]`. `env` supplies PET_* defaults, PYTHON_EXEC and
// OMP_NUM_THREADS; `host` answers what the flags' meaning depends on (no other I/O is done; files
// are read afterwards, by LoadLaunchCredentials). Errors are InvalidArgument with a one-line
// message naming the flag and the fix.
absl::StatusOr<ParsedCommandLine> ParseCommandLine(const std::vector<std::string>& args,
                                                   const std::map<std::string, std::string>& env,
                                                   const HostProbe& host = ThisHost());

// The launch's flags (`dtrun [options] PROGRAM`), for shell completion.
std::vector<CliOption> LaunchFlags();

// The step after parsing that reads files: the token and TLS material of a multi-node job (one
// rule for every command, see launcher/credentials.h). InvalidArgument naming the flag.
absl::Status LoadLaunchCredentials(LaunchConfig& config);

}  // namespace dtrun
