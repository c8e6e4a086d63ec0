// A port held by a listening socket is taken, and free again once it is closed.
#include "base/tcp_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "base/unique_fd.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

TEST(TcpPortTest, APortHeldByAListenerIsTakenAndFreeOnceItCloses) {
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener.valid());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.get(), 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_TRUE(TcpPortTaken("127.0.0.1", port));
  listener.Reset();
  EXPECT_FALSE(TcpPortTaken("127.0.0.1", port));
  // Not an address of this host: not "taken", left to the real bind to report.
  EXPECT_FALSE(TcpPortTaken("192.0.2.1", port));
  EXPECT_FALSE(TcpPortTaken("", port));
}

}  // namespace
}  // namespace dtrun
