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
