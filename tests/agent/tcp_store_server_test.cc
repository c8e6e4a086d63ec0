#include "agent/tcp_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

template <typename T>
std::string Raw(T v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(T)); }
std::string Str(const std::string& s) { return Raw<uint64_t>(s.size()) + s; }

int Connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};  // a bound on every read below
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

std::string ReadN(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += r;
  }
  out.resize(got);
  return out;
}

TEST(TcpStoreServerTest, PortZeroBindsAFreePortAndServesWaitAcrossClients) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  int waiter = Connect((*server)->port());
  int setter = Connect((*server)->port());
  std::string wait = Raw<uint8_t>(5) + Raw<uint64_t>(1) + Str("ready");
  ASSERT_EQ(::send(waiter, wait.data(), wait.size(), 0), static_cast<ssize_t>(wait.size()));
  std::string set = Raw<uint8_t>(0) + Str("ready") + Str("1");
  ASSERT_EQ(::send(setter, set.data(), set.size(), 0), static_cast<ssize_t>(set.size()));
  EXPECT_EQ(ReadN(waiter, 1), Raw<uint8_t>(0));  // STOP_WAITING
  ::close(waiter);
  ::close(setter);
}

TEST(TcpStoreServerTest, PortInUseIsUnavailable) {
  auto first = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = TcpStoreServer::Start("127.0.0.1", (*first)->port());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

TEST(TcpStoreServerTest, UnresolvableHostIsInvalidArgument) {
  auto s = TcpStoreServer::Start("no-such-host.invalid", 0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrun
