#include "launcher/rdzv_server_command.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/endpoint.h"
#include "base/tcp_port.h"
#include "launcher/credentials.h"
#include "launcher/launch_config.h"
#include "launcher/rendezvous_host.h"
#include "launcher/subcommand_cli.h"
#include "rendezvous/grpc_module.h"

namespace dtrun {

namespace {

struct RdzvServerFlags {
  std::string endpoint, nnodes = "1", run_id = "none", conf, backend = "c10d", on_straggler = "warn";
  CredentialFlags credential_flags;
  int max_restarts = 0;
};

void DefineRdzvServerFlags(CLI::App& app, RdzvServerFlags& f) {
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", f.endpoint,
                 "HOST:PORT to listen on: the rendezvous, and the workers' store (MASTER_ADDR:MASTER_PORT)")
      ->required();
  app.add_option("--nnodes", f.nnodes, "N or MIN:MAX")->capture_default_str();
  app.add_option("--rdzv-backend,--rdzv_backend", f.backend, "c10d (elastic ranks) or static")->capture_default_str();
  app.add_option("--rdzv-id,--rdzv_id", f.run_id, "The job's run id")->capture_default_str();
  app.add_option("--rdzv-conf,--rdzv_conf", f.conf, "key=value,... (as for dtrun)");
  app.add_option("--max-restarts,--max_restarts", f.max_restarts, "Job-wide restart budget")->capture_default_str();
  app.add_option("--on-straggler", f.on_straggler, "warn, or replace: swap a straggler's node for a spare, once")
      ->check(CLI::IsMember({"warn", "replace"}))
      ->capture_default_str();
  AddCredentialFlags(app, f.credential_flags);
}

constexpr char kRdzvServerAbout[] = "dtrun rdzv-server: host a job's rendezvous on this machine";

}  // namespace

std::vector<CliOption> RdzvServerCommandFlags() {
  return DescribeCommand(kRdzvServerAbout, "dtrun rdzv-server", &DefineRdzvServerFlags);
}

int RdzvServerCommand(const std::vector<std::string>& args) {
  CLI::App app(kRdzvServerAbout, "dtrun rdzv-server");
  RdzvServerFlags f;
  DefineRdzvServerFlags(app, f);
  if (std::optional<int> rc = ParseSubcommand(app, args)) return *rc;
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "dtrun rdzv-server: error: %s\n", std::string(st.message()).c_str());
    return st.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  };
  rdzv::RendezvousOptions o;
  absl::StatusOr<std::pair<int, int>> nodes = ParseNnodes(f.nnodes);
  if (!nodes.ok()) return fail(nodes.status());
  std::tie(o.min_nodes, o.max_nodes) = *nodes;
  o.static_ranks = f.backend == "static";
  o.replace_stragglers = f.on_straggler == "replace";
  o.max_restarts = f.max_restarts;
  o.run_id = f.run_id;
  absl::StatusOr<Credentials> creds = LoadCredentials(f.credential_flags);
  if (!creds.ok()) return fail(creds.status());
  o.token = creds->token;
  absl::StatusOr<std::map<std::string, std::string>> kv = ParseRdzvConf(f.conf);
  if (!kv.ok()) return fail(kv.status());
  if (absl::Status st = rdzv::ApplyRdzvConf(*kv, o); !st.ok()) return fail(st);
  absl::StatusOr<std::pair<std::string, int>> ep = ParseEndpoint(f.endpoint, 29400);
  if (!ep.ok()) return fail(ep.status());

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before the module's threads start
  absl::StatusOr<const rdzv::GrpcModuleApi*> grpc = rdzv::LoadGrpcModule();
  if (!grpc.ok()) return fail(grpc.status());
  if (ep->second != 0 && TcpPortTaken(ep->first, ep->second)) {
    return fail(absl::UnavailableError(absl::StrCat("--rdzv-endpoint ", f.endpoint,
                                                    ": the port is taken (another service or job holds it); "
                                                    "choose another port")));
  }
  // The workers' store shares the endpoint, as with a service hosted by an agent.
  absl::StatusOr<HostedRendezvous> hosted =
      HostRendezvousWithStore(**grpc, ep->first, ep->second, o, creds->tls, /*copies=*/nullptr);
  if (!hosted.ok()) return fail(hosted.status());
  std::printf(
      "dtrun rdzv-server: serving run %s on %s:%d (the rendezvous, and the workers' store for up to %zu workers: half "
      "the open-file limit)\n",
      f.run_id.c_str(), ep->first.c_str(), hosted->store->port(), hosted->store->max_connections());
  std::fflush(stdout);
  // Ends on SIGINT/SIGTERM, or once the job is over and every node has left.
  std::thread watcher([s = hosted->service.get()] {
    s->AwaitJobOver();
    ::kill(::getpid(), SIGTERM);
  });
  int sig = 0;
  ::sigwait(&set, &sig);
  hosted->service->Stop();
  watcher.join();
  return 0;
}

}  // namespace dtrun
