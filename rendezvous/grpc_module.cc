// The module's entry point (compiled into libdtrun_rdzv_grpc.so only).
#include "rendezvous/grpc_module.h"

#include "base/status_macros.h"
#include "rendezvous/rendezvous_client.h"
#include "rendezvous/tls_check.h"
#include "replica/replica_grpc.h"

namespace dtrun::rdzv {
namespace {

absl::StatusOr<std::unique_ptr<RoundSource>> StartRoundSource(const ClientOptions& options, const NodeInfo& node,
                                                              std::chrono::steady_clock::time_point deadline) {
  DT_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousClient> client, RendezvousClient::Create(options));
  return std::unique_ptr<RoundSource>(GrpcRoundSource::Start(std::move(client), node, deadline));
}

absl::Status KillJob(const ClientOptions& options, const std::string& reason) {
  DT_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousClient> client, RendezvousClient::Create(options));
  return client->Kill(reason);
}

absl::StatusOr<JobSummary> JobStatus(const ClientOptions& options) {
  DT_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousClient> client, RendezvousClient::Create(options));
  return client->Status();
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> StartServer(const std::string& host, int port,
                                                              const RendezvousOptions& options,
                                                              const TlsCredentials& tls,
                                                              std::shared_ptr<replica::ReplicaKeeper> copies) {
  std::shared_ptr<grpc::Service> beside;
  if (copies) {
    const ClientOptions job{/*endpoint=*/"", options.run_id, options.token, tls};
    beside = replica::NewReplicaService(job, std::move(copies));
  }
  return RendezvousServer::Start(host, port, options, tls, std::move(beside));
}

constexpr GrpcModuleApi kApi = {
    &StartServer,          &StartRoundSource, &KillJob, &JobStatus, &CheckTlsCredentials, &replica::StartReplicaServer,
    &replica::ConnectBuddy};

}  // namespace
}  // namespace dtrun::rdzv

extern "C" const dtrun::rdzv::GrpcModuleApi* dtrun_rdzv_grpc_module_v1() { return &dtrun::rdzv::kApi; }
