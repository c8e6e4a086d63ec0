#include "base/tcp_port.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "base/unique_fd.h"

namespace dtrun {
namespace {

using AddrList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

AddrList Resolve(const std::string& host, const char* service, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  if (host.empty() || ::getaddrinfo(host.c_str(), service, &hints, &found) != 0) found = nullptr;
  return AddrList(found, &::freeaddrinfo);
}

bool SameAddress(const addrinfo& x, const addrinfo& y) {
  if (x.ai_family != y.ai_family) return false;
  if (x.ai_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(x.ai_addr)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(y.ai_addr)->sin_addr.s_addr;
  }
  return x.ai_family == AF_INET6 &&
         ::memcmp(&reinterpret_cast<const sockaddr_in6*>(x.ai_addr)->sin6_addr,
                  &reinterpret_cast<const sockaddr_in6*>(y.ai_addr)->sin6_addr, sizeof(in6_addr)) == 0;
}

}  // namespace

bool TcpPortTaken(const std::string& host, int port) {
  AddrList found = Resolve(host, std::to_string(port).c_str(), AI_NUMERICSERV | AI_PASSIVE);
  if (!found) return false;
  UniqueFd fd(::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  const int on = 1;  // as servers bind: a port left in TIME_WAIT is free
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  return ::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0 && errno == EADDRINUSE;
}

bool ShareAnAddress(const std::string& a, const std::string& b) {
  AddrList as = Resolve(a, nullptr, 0), bs = Resolve(b, nullptr, 0);
  for (const addrinfo* x = as.get(); x != nullptr; x = x->ai_next) {
    for (const addrinfo* y = bs.get(); y != nullptr; y = y->ai_next) {
      if (SameAddress(*x, *y)) return true;
    }
  }
  return false;
}

}  // namespace dtrun
