#include "base/tcp_port.h"

#include <errno.h>
#include <netdb.h>
#include <sys/socket.h>

#include <string>

#include "base/unique_fd.h"

namespace dtrun {

bool TcpPortTaken(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool taken = false;
  UniqueFd fd(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0));
  if (fd.valid()) {
    const int on = 1;  // as servers bind: a port left in TIME_WAIT is free
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    taken = ::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 && errno == EADDRINUSE;
  }
  ::freeaddrinfo(found);
  return taken;
}

}  // namespace dtrun
