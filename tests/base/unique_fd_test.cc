#include "base/unique_fd.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace dtrun {
namespace {

std::pair<UniqueFd, UniqueFd> NonBlockingSocketPair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

TEST(PendingOutputTest, AFullSocketKeepsTheRestAndAGonePeerIsAnError) {
  auto [a, b] = NonBlockingSocketPair();
  std::string pending(64 << 20, 'x');  // far more than a socket buffer holds
  EXPECT_TRUE(SendPending(a.get(), pending));
  EXPECT_FALSE(pending.empty());
  EXPECT_LT(pending.size(), size_t{64} << 20);
  b.Reset();
  EXPECT_FALSE(SendPending(a.get(), pending));  // no SIGPIPE: the test process lives on
}

TEST(PendingOutputTest, APipeTakesAShortLineWhole) {
  absl::StatusOr<Pipe> p = MakePipe(/*nonblocking_read=*/true);
  ASSERT_TRUE(p.ok());
  ::fcntl(p->write.get(), F_SETFL, O_NONBLOCK);
  std::string pending = "c\n";
  EXPECT_TRUE(WritePending(p->write.get(), pending));
  EXPECT_TRUE(pending.empty());
  char buf[4] = {};
  EXPECT_EQ(::read(p->read.get(), buf, sizeof(buf)), 2);
  EXPECT_EQ(std::string(buf, 2), "c\n");
}

}  // namespace
}  // namespace dtrun
