#include "launcher/kill_command.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "CLI/CLI.hpp"
#include "launcher/credentials.h"
#include "launcher/remote_job.h"
#include "launcher/subcommand_cli.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/run_registry.h"
#include "base/env_names.h"
#include "base/exit_codes.h"
#include "base/process_table.h"
#include "base/signal_names.h"
#include "rendezvous/grpc_module.h"

namespace dtrun {
namespace {

struct Target {
  ProcessEntry proc;
  std::string kind;  // "agent", "ssh -H" (a dtrun -H launcher) or "worker"
  std::string run_id;
};

// Agents from the registry plus every process carrying a launch marker, filtered by run id.
std::vector<Target> FindTargets(const std::string& run_id, bool all) {
  std::vector<Target> out;
  std::set<pid_t> seen;
  for (const LaunchRecord& r : ListLaunches()) {
    if (!all && r.run_id != run_id) continue;
    absl::StatusOr<ProcessEntry> p = ReadProcess(r.pid, {});
    if (!p.ok() || p->start_ticks != r.start_ticks) continue;
    seen.insert(r.pid);
    out.push_back({std::move(*p), r.endpoint.empty() ? "agent" : "ssh -H", r.run_id});
  }
  for (ProcessEntry& p : FindProcessesWithEnv(env::kLaunchId, std::nullopt,
                                              {env::kRunId, env::kRank, env::kLocalRank})) {
    std::string rid = p.env.count(env::kRunId) ? p.env[env::kRunId] : "?";
    if ((!all && rid != run_id) || seen.count(p.pid)) continue;
    out.push_back({std::move(p), "worker", rid});
  }
  return out;
}

void PrintTable(const std::vector<Target>& targets) {
  std::printf("%-8s %-8s %-7s %-34s %-5s %-6s %s\n", "PID", "PPID", "KIND", "RUN_ID", "RANK",
              "LOCAL", "COMMAND");
  for (const Target& t : targets) {
    auto get = [&](const char* name) {
      auto it = t.proc.env.find(name);
      return it == t.proc.env.end() ? std::string("-") : it->second;
    };
    std::printf("%-8d %-8d %-7s %-34s %-5s %-6s %s\n", t.proc.pid, t.proc.ppid, t.kind.c_str(),
                t.run_id.substr(0, 34).c_str(), get(env::kRank).c_str(), get(env::kLocalRank).c_str(),
                t.proc.cmdline.substr(0, 100).c_str());
  }
}

// Every node's agent sees the job KILLED within one event and stops its workers.
int KillThroughRendezvous(const std::string& endpoint, const std::string& run_id, const CredentialFlags& flags) {
  absl::StatusOr<RemoteJob> remote = ConnectRemote(endpoint, run_id, flags);
  if (!remote.ok()) {
    std::fprintf(stderr, "dtrun kill: error: %s\n", std::string(remote.status().message()).c_str());
    return ExitCodeFor(remote.status());
  }
  absl::Status st = remote->grpc->kill_job(remote->options, "killed by dtrun kill --endpoint");
  if (!st.ok()) {
    std::fprintf(stderr, "dtrun kill: error: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("dtrun kill: job %s at %s is being stopped on every node\n", run_id.c_str(), endpoint.c_str());
  return 0;
}

struct KillFlags {
  std::string run_id, signal_name = "SIGTERM", endpoint;
  CredentialFlags credential_flags;
  bool all = false, dry_run = false;
  double grace = 10;
};

void DefineKillFlags(CLI::App& app, KillFlags& f) {
  app.add_option("--run-id,--run_id,--rdzv-id", f.run_id, "The job's run id (see dtrun status)");
  app.add_flag("--all", f.all, "Every dtrun job of this user on this machine");
  app.add_option("--signal,-s", f.signal_name, "First signal to send")->capture_default_str();
  app.add_option("--grace", f.grace, "Seconds before SIGKILL")->capture_default_str();
  app.add_flag("--dry-run,-n", f.dry_run, "Only list the processes that would be signalled");
  app.add_option("--endpoint", f.endpoint, "Multi-node: kill the job on every node through its rendezvous HOST:PORT");
  AddCredentialFlags(app, f.credential_flags);  // with --endpoint
}

constexpr char kKillAbout[] = "dtrun kill: end the processes of dtrun jobs on this machine";

}  // namespace

std::vector<CliOption> KillCommandFlags() { return DescribeCommand(kKillAbout, "dtrun kill", &DefineKillFlags); }

int KillCommand(const std::vector<std::string>& args) {
  CLI::App app(kKillAbout, "dtrun kill");
  KillFlags f;
  DefineKillFlags(app, f);
  if (std::optional<int> rc = ParseSubcommand(app, args)) return *rc;
  absl::StatusOr<int> signo = ParseSignal(f.signal_name);
  if (!signo.ok()) {
    std::fprintf(stderr, "dtrun kill: error: --signal: %s\n", std::string(signo.status().message()).c_str());
    return 2;
  }
  if (!std::isfinite(f.grace) || f.grace < 0 || f.grace > 86400) {
    std::fprintf(stderr, "dtrun kill: error: --grace %g: expected seconds between 0 and 86400\n", f.grace);
    return 2;
  }
  if (!f.endpoint.empty()) {
    return KillThroughRendezvous(f.endpoint, f.run_id.empty() ? "none" : f.run_id, f.credential_flags);
  }
  if (f.run_id.empty() == !f.all) {
    std::fprintf(stderr, "dtrun kill: error: name one job with --run-id ID or use --all; "
                         "`dtrun status` lists the jobs\n");
    return 2;
  }
  if (absl::StatusOr<std::string> dir = RuntimeDir(); !dir.ok()) {
    std::fprintf(stderr, "dtrun kill: error: %s\n", std::string(dir.status().message()).c_str());
    return 1;
  }
  std::vector<Target> targets = FindTargets(f.run_id, f.all);
  if (targets.empty()) {
    std::fprintf(stderr, "dtrun kill: no dtrun processes found%s\n",
                 f.all ? "" : absl::StrCat(" for run id ", f.run_id).c_str());
    return 1;
  }
  if (f.dry_run) {
    PrintTable(targets);
    return 0;
  }
  std::vector<ProcessEntry> procs;
  for (const Target& t : targets) procs.push_back(t.proc);
  int n = TerminateProcesses(procs, *signo, std::chrono::milliseconds(static_cast<int64_t>(f.grace * 1000)));
  std::printf("dtrun kill: ended %d process(es)\n", n);
  return 0;
}

}  // namespace dtrun
