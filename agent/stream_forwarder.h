// Forwards accepted TCP connections, byte for byte in both directions, to a local upstream port.
// The agent's store uses it to serve the rendezvous (gRPC, plaintext or TLS) on the same declared
// port as the workers' TCPStore: a connection whose first byte is not a TCPStore request is
// handed here and relayed to the gRPC server on loopback. Runs on the store's epoll thread;
// non-blocking throughout; at most kMaxBuffered bytes held per direction (the faster side waits).
#pragma once

#include <sys/epoll.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "base/outbox.h"
#include "base/unique_fd.h"

namespace dtrun {

class StreamForwarder {
 public:
  StreamForwarder(int epoll_fd, uint16_t upstream_port);
  ~StreamForwarder();

  // Takes over `client`, whose first bytes (already read) are `head`.
  void Forward(UniqueFd client, absl::string_view head);
  bool Owns(int fd) const { return by_fd_.count(fd) > 0; }
  void OnEvent(int fd, uint32_t events);
  size_t num_streams() const { return by_fd_.size() / 2; }

  static constexpr size_t kMaxBuffered = 1 << 20;

 private:
  struct Side {
    UniqueFd fd;
    Outbox outbox;           // bytes from the other side, not yet written to this one
    bool read_done = false;  // EOF read from this side
    bool write_shut = false;  // shutdown(SHUT_WR) sent to this side
  };
  struct Stream {
    Side sides[2];  // 0: client, 1: upstream
    bool connected = false;  // the upstream connect completed
  };
  void Pump(Stream& s);
  void Close(Stream& s);
  void UpdateInterest(Stream& s);

  int epoll_fd_;
  uint16_t upstream_port_;
  std::map<int, std::shared_ptr<Stream>> by_fd_;  // both fds of each stream
};

}  // namespace dtrun
