#include "launcher/rendezvous_host.h"

#include <functional>
#include <utility>

#include "base/open_file_limit.h"
#include "base/status_macros.h"

namespace dtrun {

absl::StatusOr<HostedRendezvous> HostRendezvousWithStore(const rdzv::GrpcModuleApi& grpc, const std::string& host,
                                                         int port, rdzv::RendezvousOptions options,
                                                         const rdzv::TlsCredentials& tls,
                                                         std::shared_ptr<replica::ReplicaKeeper> copies) {
  options.workers_store_at_endpoint = true;
  options.workers_store_capacity = static_cast<int64_t>(StoreConnectionCap(OpenFileLimit()));  // as the store's, below
  DT_ASSIGN_OR_RETURN(std::unique_ptr<rdzv::RendezvousServer> service,
                      grpc.start_server("127.0.0.1", 0, options, tls, copies));
  if (port != 0 && service->port() == port) {
    // The kernel gave this loopback service the declared port itself (one in the ephemeral
    // range): the store could not bind it. A second service is started while the first holds
    // it, then the first is let go.
    DT_ASSIGN_OR_RETURN(std::unique_ptr<rdzv::RendezvousServer> other,
                        grpc.start_server("127.0.0.1", 0, options, tls, copies));
    service = std::move(other);
  }
  std::function<void(int fd)> hand_off;
  if (service->adopts_connections()) hand_off = [s = service.get()](int fd) { s->Adopt(fd); };
  DT_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> store,
                      TcpStoreServer::Start(host, static_cast<uint16_t>(port), static_cast<uint16_t>(service->port()),
                                            SlowClientRule(), std::move(hand_off)));
  return HostedRendezvous{std::move(service), std::move(store)};
}

}  // namespace dtrun
