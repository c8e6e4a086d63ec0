// The gRPC service and client of buddy copies (proto/rendezvous.proto, service Replica). They
// only translate: every check of what arrives is CopyAssembler's.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/rendezvous_options.h"
#include "replica/replica_transport.h"

namespace grpc {
class Service;
}

namespace dtrun::replica {

// The Replica service alone, for a server of someone else's: the rendezvous host serves it beside
// the rendezvous on the declared port (rendezvous/rendezvous_server.h), so that a firewall which
// opens that one port between nodes lets buddy copies through.
std::shared_ptr<grpc::Service> NewReplicaService(const rdzv::ClientOptions& job, std::shared_ptr<ReplicaKeeper> keeper);

// Serves on `host`:`port` (0: any free port; Unavailable if `port` is taken), checking the job's
// credentials on every call.
absl::StatusOr<std::unique_ptr<ReplicaServer>> StartReplicaServer(const std::string& host, int port,
                                                                 const rdzv::ClientOptions& job,
                                                                 std::shared_ptr<ReplicaKeeper> keeper);
// A channel to the buddy at `host`:`port`; copies it fetches are checked against `job_hash` and
// `max_payload_bytes`.
std::unique_ptr<BuddyChannel> ConnectBuddy(const std::string& host, int port, const rdzv::ClientOptions& job,
                                           uint64_t job_hash, uint64_t max_payload_bytes);

}  // namespace dtrun::replica
