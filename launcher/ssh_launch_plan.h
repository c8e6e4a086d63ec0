// `dtrun -H a:4,b:4 [options] PROGRAM` (or --hostfile FILE): one command on one machine starts the
// job on every listed host over ssh, as horovodrun and mpirun do. This file holds what is decided
// before anything starts — the remote command line of each host — as plain values, so every
// rule is unit-tested without ssh. launcher/ssh_launcher.h runs the plan.
//
// Each host runs the same dtrun as a node of one elastic c10d job whose rendezvous the first host
// serves, with the launch's own flags, in the same working directory, with the environment a
// training job depends on (PATH, the Python and library paths, NCCL_*, CUDA_*, TORCH_*, ...;
// -x NAME[=VALUE] adds more). The token is never on a command line: it travels on ssh's stdin,
// which stays open while the launching dtrun lives (see launcher/control_stdin.h).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "launcher/control_stdin.h"
#include "launcher/credentials.h"
#include "launcher/host_list.h"

namespace CLI {
class App;
}

namespace dtrun {

struct RawFlags;

struct SshLaunch {
  std::vector<HostSlots> hosts;
  std::vector<std::string> ssh;                          // the remote shell and its options; the host follows
  std::string remote_dtrun;                              // dtrun's path on every host
  std::string cwd;                                       // the working directory on every host
  std::vector<std::pair<std::string, std::string>> env;  // set for dtrun on every host
  std::vector<std::string> node_args;                    // every host's flags after the plan's own, then PROGRAM ARGS
  std::string nproc;                                     // --nproc-per-node of a host listed without :N
  std::string nnodes;                                    // --nnodes (default: every host)
  int max_nodes = 1;                                     // hosts past it join as spares
  int min_nodes = 1;                                     // fewer hosts still running cannot carry the job on
  int port = 29400;                                      // the rendezvous' port on the first host
  std::string endpoint;                                  // HOST:PORT of the rendezvous (SetHosts)
  std::string run_id;
  std::string rdzv_conf;  // the user's --rdzv-conf, without is_host
  std::string token;      // sent on stdin
  std::chrono::milliseconds shutdown_timeout{30000};

  // Read after parsing (LoadSshLaunchFiles), as every command reads its files.
  std::string hostfile;      // --hostfile; "" with -H
  std::string nnodes_given;  // --nnodes as given; "" for every host
  CredentialFlags credentials;
};

// dtrun's flags on host `i` that the plan sets (after kControlStdinFlag, before SshLaunch::node_args).
std::vector<std::string> RemoteDtrunArgv(const SshLaunch& launch, size_t i);
// The line ssh has host `i`'s shell run: cd, env, dtrun, every word single-quoted.
std::string RemoteCommand(const SshLaunch& launch, size_t i);
// The ssh command for host `i`.
std::vector<std::string> SshArgv(const SshLaunch& launch, size_t i);
// A word the shell reads back unchanged.
std::string ShellQuote(const std::string& word);

// What every host's dtrun gets of this environment: the variables listed in docs/DESIGN.md, then
// `extra` (-x NAME takes NAME's value here, -x NAME=VALUE sets it). InvalidArgument for a bad -x.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ForwardedEnvironment(
    const std::map<std::string, std::string>& env, const std::vector<std::string>& extra);

// The launch's inputs: `args` is the whole command line, PROGRAM at `program_at`; `this_dtrun`
// is this binary (the default --remote-dtrun).
struct SshLaunchInputs {
  const std::vector<std::string>& args;
  size_t program_at;
  const std::map<std::string, std::string>& env;
  std::string this_dtrun;
  std::string cwd;
};
// Builds the plan from the parsed flags (-H or --hostfile given); the hosts of -H are set, a
// hostfile is read later. Errors name the flag and the fix.
absl::StatusOr<SshLaunch> PlanSshLaunch(const RawFlags& f, const CLI::App& app, const SshLaunchInputs& in);
// Sets the hosts and what follows from them (the node count, the rendezvous endpoint).
absl::Status SetHosts(SshLaunch& launch, std::vector<HostSlots> hosts);
// Reads --hostfile and the token (--rdzv-token-file, else the one given, else a fresh one).
absl::Status LoadSshLaunchFiles(SshLaunch& launch);

}  // namespace dtrun
