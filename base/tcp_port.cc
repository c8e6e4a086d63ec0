#include "base/tcp_port.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <string>

#include "base/unique_fd.h"

namespace dtrun {

bool TcpPortTaken(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
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

bool ResolvesTo(const std::string& host, const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* want = nullptr;
  if (::getaddrinfo(addr.c_str(), nullptr, &hints, &want) != 0) return false;
  hints.ai_flags = 0;
  addrinfo* found = nullptr;
  bool same = false;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) == 0) {
    for (const addrinfo* a = found; a != nullptr && !same; a = a->ai_next) {
      if (a->ai_family != want->ai_family) continue;
      if (a->ai_family == AF_INET) {
        same = reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr ==
               reinterpret_cast<const sockaddr_in*>(want->ai_addr)->sin_addr.s_addr;
      } else if (a->ai_family == AF_INET6) {
        same = ::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr,
                        &reinterpret_cast<const sockaddr_in6*>(want->ai_addr)->sin6_addr, sizeof(in6_addr)) == 0;
      }
    }
    ::freeaddrinfo(found);
  }
  ::freeaddrinfo(want);
  return same;
}

}  // namespace dtrun
