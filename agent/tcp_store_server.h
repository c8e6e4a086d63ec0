// A c10d-compatible TCPStore server hosted by the agent, so that the workers' store outlives
// worker restarts and its port is bound once (port 0 → chosen by the kernel, no probe/bind race).
// Workers connect with TORCHELASTIC_USE_AGENT_STORE=True, exactly as under torchrun's agent store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace dtrun {

// A client holding replies its socket has not taken must take `min_bytes` of them (or all it holds)
// in each `period`, or the store closes it (with replies past StoreCore's backlog caps, its further
// requests already wait unrun). A floor, not "any byte": a reader that trickled a byte or a TCP
// segment per period would otherwise hold its backlog, and with it the store's total cap, for ever.
struct SlowClientRule {
  std::chrono::milliseconds period = std::chrono::seconds(30);
  uint64_t min_bytes = uint64_t{1} << 20;  // 35 KB/s: far below any network a store is used over
};

// The most connections the store takes in a process that may open `open_file_limit` files: half
// (the rest are for the workers' pipes, the rendezvous' own connections and dtrun itself). dtrun
// lifts its soft limit to the hard one at start, so the hard limit decides: under torchrun's
// c10d every worker of the job holds one. Past it the store refuses, and says how to lift it.
size_t StoreConnectionCap(size_t open_file_limit);

class TcpStoreServer {
 public:
  // Binds `host:port` (a name or a literal address; port 0 picks a free port) and starts serving
  // on a thread of its own. Errors: Unavailable if the address cannot be bound (port in use),
  // InvalidArgument if `host` does not resolve.
  // `forward_port` (non-zero): connections that do not speak TCPStore (their first byte is no
  // TCPStore request: an HTTP/2 preface, a TLS handshake) are relayed to 127.0.0.1:forward_port,
  // so the rendezvous service and the workers' store share the one declared port. Known at start,
  // so that no early connection is mistaken for a TCPStore client.
  // `hand_off` (set): such connections are given to it instead, their bytes unread, and it owns
  // the socket from then on: an in-process gRPC server takes plaintext connections this way, with
  // no copy and no second socket. Called on the store's thread, so what it calls must outlive
  // this server.
  static absl::StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, uint16_t port,
                                                               uint16_t forward_port = 0,
                                                               SlowClientRule slow_client = SlowClientRule(),
                                                               std::function<void(int fd)> hand_off = nullptr);
  ~TcpStoreServer();  // stops the thread and closes every connection

  uint16_t port() const { return port_; }
  // StoreConnectionCap of the open-file limit at Start.
  size_t max_connections() const { return StoreConnectionCap(open_file_limit_); }

 private:
  TcpStoreServer(UniqueFd listener, UniqueFd epoll, UniqueFd wakeup, uint16_t port, uint16_t forward_port,
                 SlowClientRule slow_client, std::function<void(int fd)> hand_off, size_t open_file_limit);
  void Serve();

  UniqueFd listener_;
  UniqueFd epoll_;
  UniqueFd wakeup_;  // eventfd: written by the destructor to stop Serve()
  uint16_t port_;
  uint16_t forward_port_;
  SlowClientRule slow_client_;
  std::function<void(int fd)> hand_off_;
  const size_t open_file_limit_;  // at Start
  std::thread thread_;
};

}  // namespace dtrun
