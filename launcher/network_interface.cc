#include "launcher/network_interface.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

namespace dtrun {
namespace {

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

std::optional<std::string> InterfaceWithAddress(const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* resolved = nullptr;
  if (address.empty() || ::getaddrinfo(address.c_str(), nullptr, &hints, &resolved) != 0) {
    return std::nullopt;
  }
  ifaddrs* ifs = nullptr;
  std::optional<std::string> found;
  if (::getifaddrs(&ifs) == 0) {
    for (addrinfo* ai = resolved; ai != nullptr && !found; ai = ai->ai_next) {
      for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
        if (SameAddress(i->ifa_addr, ai->ai_addr)) {
          found = i->ifa_name;
          break;
        }
      }
    }
    ::freeifaddrs(ifs);
  }
  ::freeaddrinfo(resolved);
  return found;
}

}  // namespace dtrun

#include <arpa/inet.h>
#include <unistd.h>

namespace dtrun {

std::optional<std::string> LocalAddressFacing(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port > 0 ? port : 9);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0) return std::nullopt;
  std::optional<std::string> out;
  for (addrinfo* ai = res; ai != nullptr && !out; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      const void* a = local.ss_family == AF_INET6
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, a, buf, sizeof(buf))) out = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace dtrun
