// The gRPC half of the rendezvous lives in a shared module (libdtrun_rdzv_grpc.so) that `dtrun`
// loads only for multi-node jobs: single-node launches never map gRPC, protobuf or OpenSSL, so
// they start in a few milliseconds. This header has no gRPC types: only the module's entry table.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/rendezvous_options.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/round_source.h"
#include "replica/replica_transport.h"

namespace dtrun::rdzv {

struct GrpcModuleApi {
  // `copies`, if any: the host's buddy copies, served on the same port (replica/replica_grpc.h).
  absl::StatusOr<std::unique_ptr<RendezvousServer>> (*start_server)(const std::string& host, int port,
                                                                    const RendezvousOptions& options,
                                                                    const TlsCredentials& tls,
                                                                    std::shared_ptr<replica::ReplicaKeeper> copies);
  // Joins in the background; see GrpcRoundSource.
  absl::StatusOr<std::unique_ptr<RoundSource>> (*start_round_source)(
      const ClientOptions& options, const NodeInfo& node, std::chrono::steady_clock::time_point join_deadline);
  // One-shot calls for `dtrun kill --endpoint` / `dtrun status --endpoint`.
  absl::Status (*kill_job)(const ClientOptions& options, const std::string& reason);
  absl::StatusOr<JobSummary> (*job_status)(const ClientOptions& options);
  // TLS material checked as a handshake will use it (rendezvous/tls_check.h).
  absl::Status (*check_tls)(const TlsCredentials& tls);
  // Buddy copies of snapshots (replica/replica_grpc.h).
  absl::StatusOr<std::unique_ptr<replica::ReplicaServer>> (*start_replica_server)(
      const std::string& host, int port, const ClientOptions& job, std::shared_ptr<replica::ReplicaKeeper> keeper);
  std::unique_ptr<replica::BuddyChannel> (*connect_buddy)(const std::string& host, int port, const ClientOptions& job,
                                                          uint64_t job_hash, uint64_t max_payload_bytes);
};

// Loads the module next to the executable (../lib/ or the same folder) or from
// $DTRUN_RDZV_MODULE. FailedPrecondition with the paths tried if it cannot be loaded.
absl::StatusOr<const GrpcModuleApi*> LoadGrpcModule();

}  // namespace dtrun::rdzv

extern "C" const dtrun::rdzv::GrpcModuleApi* dtrun_rdzv_grpc_module_v1();
