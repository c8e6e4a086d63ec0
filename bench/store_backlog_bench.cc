// The rendezvous store sending a large backlog of replies to a reader that takes a little at a
// time: the cost should follow the bytes sent, not bytes sent times bytes held.
//   store_backlog_bench [VALUE_MIB] [GETS] [RCVBUF_KIB]   (defaults 8, 8, 64)
// One client SETs a VALUE_MIB value, pipelines GETS GETs of it and reads every reply through a
// RCVBUF_KIB receive buffer. Prints the wall time and the process's CPU time (the store's thread
// does nearly all of it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "agent/tcp_store_server.h"

namespace {

template <typename T>
std::string Raw(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
std::string Str(const std::string& s) { return Raw<uint64_t>(s.size()) + s; }

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

bool SendAll(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t value_mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8;
  const int gets = argc > 2 ? std::atoi(argv[2]) : 8;
  const int rcvbuf = (argc > 3 ? std::atoi(argv[3]) : 64) << 10;
  auto server = dtrun::TcpStoreServer::Start("127.0.0.1", 0);
  if (!server.ok()) {
    std::fprintf(stderr, "store: %s\n", server.status().ToString().c_str());
    return 1;
  }
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));  // before connect: the window
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((*server)->port());
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return 1;
  const std::string value(value_mib << 20, 'v');
  std::string requests = Raw<uint8_t>(0) + Str("k") + Str(value);
  for (int i = 0; i < gets; ++i) requests += Raw<uint8_t>(2) + Str("k");
  const size_t expected = static_cast<size_t>(gets) * (8 + value.size());
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  if (!SendAll(fd, requests)) return 1;
  std::string buf(static_cast<size_t>(rcvbuf), '\0');
  size_t got = 0;
  while (got < expected) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) {
      std::fprintf(stderr, "the store closed the connection after %zu of %zu bytes\n", got, expected);
      return 1;
    }
    got += static_cast<size_t>(n);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d GETs of %zu MiB (%zu MiB of replies) through a %d KiB receive buffer: %.3f s wall, %.3f s CPU\n",
              gets, value_mib, expected >> 20, rcvbuf >> 10, wall, CpuSeconds() - cpu0);
  ::close(fd);
  return 0;
}
