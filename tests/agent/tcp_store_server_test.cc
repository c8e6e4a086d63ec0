#include "agent/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <vector>

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

// A plain listening socket on loopback standing in for the gRPC service behind the shared port.
struct Upstream {
  Upstream() : fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd, 8);
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  ~Upstream() { ::close(fd); }
  int Accept() {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return -1;
    int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    timeval tv{10, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return c;
  }
  int fd;
  uint16_t port = 0;
};

TEST(TcpStoreServerTest, OtherProtocolsOnTheSamePortAreRelayedToTheForwardPort) {
  Upstream grpc;
  auto server = TcpStoreServer::Start("127.0.0.1", 0, grpc.port);
  ASSERT_TRUE(server.ok()) << server.status();
  // An HTTP/2 client (as gRPC opens) reaches the upstream, both ways, half-closes included.
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  int h2 = Connect((*server)->port());
  ASSERT_EQ(::send(h2, preface.data(), preface.size(), 0), static_cast<ssize_t>(preface.size()));
  int up = grpc.Accept();
  ASSERT_GE(up, 0);
  EXPECT_EQ(ReadN(up, preface.size()), preface);
  ASSERT_EQ(::send(up, "settings", 8, 0), 8);
  EXPECT_EQ(ReadN(h2, 8), "settings");
  // Meanwhile a TCPStore client on the same port is served by the store itself.
  int store = Connect((*server)->port());
  std::string set = Raw<uint8_t>(0) + Str("k") + Str("v"), get = Raw<uint8_t>(2) + Str("k");
  ASSERT_EQ(::send(store, (set + get).data(), set.size() + get.size(), 0), static_cast<ssize_t>(set.size() + get.size()));
  EXPECT_EQ(ReadN(store, 9), Str("v"));
  ::shutdown(h2, SHUT_WR);
  char c;
  EXPECT_EQ(::recv(up, &c, 1, 0), 0);  // the client's half-close reached the upstream
  ::close(up);
  EXPECT_EQ(::recv(h2, &c, 1, 0), 0);  // and the upstream's close reached the client
  ::close(h2);
  ::close(store);
}

// With a hand-off (the in-process gRPC server, plaintext), such a connection is given away with
// its bytes unread and no relay in between; TCPStore clients are still the store's.
TEST(TcpStoreServerTest, OtherProtocolsAreHandedOffWithTheirBytesUnread) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  // The store's thread writes the socket it hands off into a pipe; the test reads it there.
  auto server = TcpStoreServer::Start("127.0.0.1", 0, 0, SlowClientRule(), [w = pipe_fds[1]](int fd) {
    EXPECT_EQ(::write(w, &fd, sizeof(fd)), static_cast<ssize_t>(sizeof(fd)));
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  int h2 = Connect((*server)->port());
  ASSERT_EQ(::send(h2, preface.data(), preface.size(), 0), static_cast<ssize_t>(preface.size()));
  pollfd p{pipe_fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10000), 1);
  int handed = -1;
  ASSERT_EQ(::read(pipe_fds[0], &handed, sizeof(handed)), static_cast<ssize_t>(sizeof(handed)));
  ASSERT_GE(handed, 0);
  timeval tv{10, 0};
  ::setsockopt(handed, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int flags = ::fcntl(handed, F_GETFL);
  ::fcntl(handed, F_SETFL, flags & ~O_NONBLOCK);
  EXPECT_EQ(ReadN(handed, preface.size()), preface);  // nothing was read before the hand-off
  ASSERT_EQ(::send(handed, "settings", 8, 0), 8);
  EXPECT_EQ(ReadN(h2, 8), "settings");  // the client talks to whoever took it, directly
  int store = Connect((*server)->port());
  std::string set = Raw<uint8_t>(0) + Str("k") + Str("v"), get = Raw<uint8_t>(2) + Str("k");
  ASSERT_EQ(::send(store, (set + get).data(), set.size() + get.size(), 0),
            static_cast<ssize_t>(set.size() + get.size()));
  EXPECT_EQ(ReadN(store, 9), Str("v"));
  for (int fd : {handed, h2, store, pipe_fds[0], pipe_fds[1]}) ::close(fd);
}

TEST(TcpStoreServerTest, PortInUseIsUnavailable) {
  auto first = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = TcpStoreServer::Start("127.0.0.1", (*first)->port());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

// This process's resident memory in bytes (the server runs on a thread of it).
size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<size_t>(resident) * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

// A client pipelines 64 GETs of an 8 MiB value and never reads (this held 1.09 GB before the
// caps): the store holds at most its backlog cap for it, serves others meanwhile, and closes it
// once it has read nothing for the stalled-client timeout.
TEST(TcpStoreServerTest, AClientThatNeverReadsItsRepliesIsBoundedThenClosed) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, 0, SlowClientRule{std::chrono::seconds(2)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string big(8 << 20, 'v');
  int setter = Connect((*server)->port());
  std::string set = Raw<uint8_t>(0) + Str("big") + Str(big) + Raw<uint8_t>(0) + Str("small") + Str("tiny") +
                    Raw<uint8_t>(4) + Raw<uint64_t>(1) + Str("big");
  ASSERT_EQ(::send(setter, set.data(), set.size(), 0), static_cast<ssize_t>(set.size()));
  ASSERT_EQ(ReadN(setter, 1).size(), 1u);  // CHECK: the value is in
  const size_t before = ResidentBytes();
  int hog = Connect((*server)->port());
  std::string gets;
  for (int i = 0; i < 64; ++i) gets += Raw<uint8_t>(2) + Str("big");
  ASSERT_EQ(::send(hog, gets.data(), gets.size(), 0), static_cast<ssize_t>(gets.size()));
  // Another client is still served (after the hog's requests, on the same thread). A small value:
  // an 8 MiB reply would wait in the store while this thread reads it, and on a loaded machine (an
  // ASan suite on 2 cores) this thread once went 2 s without reading, so the store closed this
  // client as stalled too. The store first copies the hog's replies up to the cap: under TSan on a
  // busy machine that once took longer than the 10 s read bound, so this read's bound is a minute.
  std::string get = Raw<uint8_t>(2) + Str("small");
  ASSERT_EQ(::send(setter, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  timeval minute{60, 0};
  ::setsockopt(setter, SOL_SOCKET, SO_RCVTIMEO, &minute, sizeof(minute));
  EXPECT_EQ(ReadN(setter, 8 + 4), Str("tiny"));
  const size_t grown = ResidentBytes() > before ? ResidentBytes() - before : 0;
  // Unbounded, the 64 replies are 512 MiB; the cap holds ~72 MB (64 MiB plus one reply). The bound
  // leaves room for sanitizers' shadow memory, which counts in this process's RSS too.
  EXPECT_LT(grown, size_t{320} << 20) << "the hog's replies are held up to the cap (64 MiB) plus one";
  // The hog read nothing: reset after the timeout, its unread replies dropped.
  pollfd hangup{hog, POLLRDHUP, 0};
  ASSERT_EQ(::poll(&hangup, 1, 20000), 1) << "not closed within 20 s";
  EXPECT_TRUE(hangup.revents & (POLLHUP | POLLERR)) << hangup.revents;
  ::close(hog);
  ::close(setter);
}

// A client that keeps reading, but below the floor, is closed all the same: before the floor, any
// byte taken restarted the clock, so a reader that took a segment now and then held its backlog
// (and with it part of the store's total cap) for as long as it liked. Here the floor is 64 MiB a
// second and the reader takes at most 1 MiB every 100 ms; with "any byte" (a floor of 1) it kept
// its connection until it had read all 512 MiB, 51 s.
TEST(TcpStoreServerTest, AClientThatReadsBelowTheFloorIsClosed) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, 0, SlowClientRule{std::chrono::seconds(1), uint64_t{64} << 20});
  ASSERT_TRUE(server.ok()) << server.status();
  int setter = Connect((*server)->port());
  const std::string big(8 << 20, 'v');
  std::string set = Raw<uint8_t>(0) + Str("big") + Str(big) + Raw<uint8_t>(4) + Raw<uint64_t>(1) + Str("big");
  ASSERT_EQ(::send(setter, set.data(), set.size(), 0), static_cast<ssize_t>(set.size()));
  ASSERT_EQ(ReadN(setter, 1).size(), 1u);  // CHECK: the value is in
  int slow = Connect((*server)->port());
  std::string gets;
  for (int i = 0; i < 64; ++i) gets += Raw<uint8_t>(2) + Str("big");
  ASSERT_EQ(::send(slow, gets.data(), gets.size(), 0), static_cast<ssize_t>(gets.size()));
  std::string buf(1 << 20, '\0');
  size_t read = 0;
  bool closed = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!closed && std::chrono::steady_clock::now() < give_up) {
    ssize_t n = ::recv(slow, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) read += static_cast<size_t>(n);
    closed = n == 0 || (n < 0 && errno != EAGAIN);
    pollfd hangup{slow, POLLRDHUP, 0};  // the reader's pace: 100 ms, or at once when reset
    closed = closed || ::poll(&hangup, 1, 100) == 1;
  }
  EXPECT_TRUE(closed) << "a reader below the floor kept its connection for a minute";
  EXPECT_GT(read, 0u) << "the client did read: this is not the never-reading case";
  EXPECT_LT(read, size_t{64} * (8 << 20)) << "it had not read all its replies";
  ::close(slow);
  ::close(setter);
}

// Replies of 64 MiB each hold the client's further GETs until it has read enough; a reader that
// keeps up lets the store send a whole reply at once. Every GET must still be answered: the store
// once sent a reply whole while resuming held requests and then had no event left to resume the
// rest, and the client waited forever.
TEST(TcpStoreServerTest, PipelinedGetsOfALargeValueAreAllAnsweredToAReaderThatKeepsUp) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status();
  int client = Connect((*server)->port());
  const std::string value(64 << 20, 'v');
  constexpr int kGets = 4;
  std::string requests = Raw<uint8_t>(0) + Str("k") + Str(value);
  for (int i = 0; i < kGets; ++i) requests += Raw<uint8_t>(2) + Str("k");
  for (size_t sent = 0; sent < requests.size();) {
    ssize_t n = ::send(client, requests.data() + sent, requests.size() - sent, 0);
    ASSERT_GT(n, 0) << "the store stopped reading the requests";
    sent += static_cast<size_t>(n);
  }
  const size_t expected = kGets * (8 + value.size());
  std::string buf(1 << 20, '\0');
  size_t got = 0;
  while (got < expected) {
    // A stuck store never sends again; a slow one (sanitizers, a busy machine) sends within a minute.
    pollfd readable{client, POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 60000), 1)
        << "no reply for a minute after " << got << " of " << expected << " bytes: held GETs were never resumed";
    ssize_t n = ::recv(client, buf.data(), buf.size(), 0);
    ASSERT_GT(n, 0) << "the store closed the client after " << got << " bytes";
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(got, expected);
  ::close(client);
}

TEST(StoreConnectionCapTest, HalfTheOpenFileLimitWithNoCeiling) {
  EXPECT_EQ(StoreConnectionCap(20000), 10000u);
  EXPECT_GE(StoreConnectionCap(1048576), 80000u) << "10,000 nodes of 8 workers under Docker's default limit";
  EXPECT_EQ(StoreConnectionCap(10), 16u);
}

// The cap follows the limit at Start; connections past it are closed at once (the workers' pipes of
// the next restart keep their descriptors), and those within it are served.
TEST(TcpStoreServerTest, ConnectionsPastTheCapAreClosedAndTheOthersServed) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  // Above the descriptors this process holds (earlier tests' included), so that Start can open its own.
  const size_t open_now = static_cast<size_t>(
      std::distance(std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator()));
  low.rlim_cur = open_now + 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  auto server = TcpStoreServer::Start("127.0.0.1", 0);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(server.ok()) << server.status();
  const size_t cap = StoreConnectionCap(low.rlim_cur);
  ASSERT_EQ((*server)->max_connections(), cap);
  std::vector<int> clients;
  for (size_t i = 0; i < cap; ++i) {
    clients.push_back(Connect((*server)->port()));
    std::string add = Raw<uint8_t>(3) + Str("n") + Raw<int64_t>(1);  // legacy ADD
    ASSERT_EQ(::send(clients.back(), add.data(), add.size(), 0), static_cast<ssize_t>(add.size()));
    ASSERT_EQ(ReadN(clients.back(), 8), Raw<int64_t>(static_cast<int64_t>(i) + 1))
        << "connection " << i << " is within the cap";
  }
  const int refused = Connect((*server)->port());
  char byte = 0;
  EXPECT_EQ(::recv(refused, &byte, 1, 0), 0) << "the connection past the cap is closed";
  ::close(refused);
  for (int fd : clients) ::close(fd);
}

TEST(TcpStoreServerTest, UnresolvableHostIsInvalidArgument) {
  auto s = TcpStoreServer::Start("no-such-host.invalid", 0);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dtrun
