// The gRPC rendezvous service: a thin adapter that checks credentials, calls RendezvousState under
// one mutex, parks Watch long-polls until the state's version moves, and drives the state's
// timeouts from one deadline timer (no polling). Runs inside `dtrun` on the master node and as
// `dtrun rdzv-server`.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rendezvous/rendezvous_options.h"

namespace grpc {
class Service;
}

namespace dtrun::rdzv {

class RendezvousServer {
 public:
  // Listens on `host:port` (port 0 picks one). Errors: Unavailable (cannot bind),
  // InvalidArgument (unreadable TLS files). `beside`, if any, is served on the same port for as
  // long as the server runs (the host's buddy copies, replica/replica_grpc.h).
  static absl::StatusOr<std::unique_ptr<RendezvousServer>> Start(const std::string& host, int port,
                                                                 const RendezvousOptions& options,
                                                                 const TlsCredentials& tls = {},
                                                                 std::shared_ptr<grpc::Service> beside = nullptr);
  virtual ~RendezvousServer() = default;  // shuts down: parked calls are answered, threads joined
  virtual int port() const = 0;
  // Waits until every node has left (they leave once they have seen the job's end) or `timeout`
  // passes, so that the host does not vanish before the others learn the outcome.
  virtual void AwaitNodesLeft(std::chrono::milliseconds timeout) = 0;
  // Blocks until the job is over (succeeded, failed or killed) and every node has left, or Stop().
  virtual void AwaitJobOver() = 0;
  // Answers parked calls and releases AwaitJobOver; the destructor then shuts down.
  virtual void Stop() = 0;
  // Whether Adopt can serve connections accepted elsewhere: plaintext only, as gRPC does TLS only
  // on ports it listens on itself (a TLS connection is relayed to port() instead).
  virtual bool adopts_connections() const = 0;
  // Serves `fd`, a connected socket whose bytes (an HTTP/2 preface first) are still unread; takes
  // it. Thread-safe; not after the destructor has begun.
  virtual void Adopt(int fd) = 0;
};

}  // namespace dtrun::rdzv
