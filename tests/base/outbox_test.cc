#include "base/outbox.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "base/unique_fd.h"
#include "gtest/gtest.h"

namespace dtrun {
namespace {

std::pair<UniqueFd, UniqueFd> NonBlockingSocketPair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

TEST(OutboxTest, AFullSocketKeepsTheRestAndAGonePeerIsAnError) {
  auto [a, b] = NonBlockingSocketPair();
  Outbox out;
  out.Append(std::string(64 << 20, 'x'));  // far more than a socket buffer holds
  EXPECT_TRUE(out.SendTo(a.get()));
  EXPECT_FALSE(out.empty());
  EXPECT_LT(out.size(), size_t{64} << 20);
  b.Reset();
  EXPECT_FALSE(out.SendTo(a.get()));  // no SIGPIPE: the test process lives on
}

TEST(OutboxTest, APipeTakesAShortLineWhole) {
  absl::StatusOr<Pipe> p = MakePipe(/*nonblocking_read=*/true);
  ASSERT_TRUE(p.ok());
  ::fcntl(p->write.get(), F_SETFL, O_NONBLOCK);
  Outbox out;
  out.Append(absl::string_view("c\n"));
  EXPECT_TRUE(out.WriteTo(p->write.get()));
  EXPECT_TRUE(out.empty());
  char buf[4] = {};
  EXPECT_EQ(::read(p->read.get(), buf, sizeof(buf)), 2);
  EXPECT_EQ(std::string(buf, 2), "c\n");
}

// Many pieces of all sizes, drained through a socket that takes a little at a time while more is
// appended: the reader gets every byte once, in order.
TEST(OutboxTest, PiecesAppendedWhileDrainingArriveWholeAndInOrder) {
  auto [a, b] = NonBlockingSocketPair();
  int small = 4096;
  ::setsockopt(a.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  std::string sent;
  std::string received;
  Outbox out;
  char buf[8192];
  for (int i = 0; i < 400; ++i) {
    std::string piece(static_cast<size_t>((i * 7919) % 3000 + 1), static_cast<char>('a' + i % 26));
    piece[0] = static_cast<char>(i);
    sent += piece;
    if (i % 2 == 0) {
      out.Append(std::move(piece));
    } else {
      out.Append(absl::string_view(piece));
    }
    ASSERT_TRUE(out.SendTo(a.get()));
    ssize_t n = ::recv(b.get(), buf, sizeof(buf), 0);
    if (n > 0) received.append(buf, static_cast<size_t>(n));
  }
  while (!out.empty() || received.size() < sent.size()) {
    ASSERT_TRUE(out.SendTo(a.get()));
    pollfd readable{b.get(), POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10000), 1) << "the reader waited 10 s for bytes the outbox holds";
    ssize_t n = ::recv(b.get(), buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    received.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(received.size(), sent.size());
  EXPECT_TRUE(received == sent) << "bytes reordered, lost or repeated";
}

TEST(OutboxTest, ClearDropsWhatWasHeld) {
  Outbox out;
  out.Append(std::string(1 << 20, 'x'));
  out.Append(absl::string_view("tail"));
  EXPECT_EQ(out.size(), (size_t{1} << 20) + 4);
  out.Clear();
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(out.size(), 0u);
}

}  // namespace
}  // namespace dtrun
