// The rendezvous service and the workers' TCPStore on one port: the store listens on it and gives
// gRPC connections to the service, in the same process without a copy (plaintext), or relays them
// to the service's loopback port (TLS, which gRPC does only on ports of its own). Used by the agent that hosts a
// job's rendezvous and by `dtrun rdzv-server`, so that workers everywhere see
// MASTER_ADDR:MASTER_PORT = the rendezvous endpoint, as under torchrun, and a firewall between
// nodes needs that one port open for dtrun.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "agent/tcp_store_server.h"
#include "rendezvous/grpc_module.h"

namespace dtrun {

// Declared in this order so that the store, whose thread hands connections to the service, goes
// first.
struct HostedRendezvous {
  std::unique_ptr<rdzv::RendezvousServer> service;  // on 127.0.0.1, a port of the kernel's
  std::unique_ptr<TcpStoreServer> store;            // on the endpoint; gives gRPC to `service`
};

// Starts both on `host`:`port` (port 0: one the kernel picks; store->port() says which). The
// service's assignments point the workers at the store (workers_store_at_endpoint). `copies`: the
// buddy copies this process keeps, served by the service (null: none). Unavailable if the port is
// taken.
absl::StatusOr<HostedRendezvous> HostRendezvousWithStore(const rdzv::GrpcModuleApi& grpc, const std::string& host,
                                                         int port, rdzv::RendezvousOptions options,
                                                         const rdzv::TlsCredentials& tls,
                                                         std::shared_ptr<replica::ReplicaKeeper> copies);

}  // namespace dtrun
