#include "agent/tcp_store_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/store_core.h"
#include "agent/stream_forwarder.h"
#include "base/guarded_thread.h"
#include "base/status_macros.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

absl::StatusOr<UniqueFd> BindListener(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve store address '", host, "': ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd.get(), 4096) == 0) {
      ::freeaddrinfo(res);
      return fd;
    }
    last_error = strerror(errno);
  }
  ::freeaddrinfo(res);
  return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, " (",
                                             last_error, "); choose another --master-port"));
}

uint16_t BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

void Watch(int epoll, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0) ::epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &ev);
}

using Clock = std::chrono::steady_clock;

// One accepted client; `pending` holds bytes the socket did not take yet.
struct Connection {
  UniqueFd fd;
  std::string pending;
  Clock::time_point stalled_since;  // while `pending` is not empty: since the socket last took bytes
  bool paused = false;              // not read: its requests wait for its replies to be read
  bool classified = false;          // its first byte has been seen
};

// At most half the descriptors this process may open (the rest are for the workers' pipes and
// dtrun itself), and never more than 16,384.
size_t MaxConnections() {
  rlimit lim{};
  size_t nofile = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 ? static_cast<size_t>(lim.rlim_cur) : 1024;
  return std::clamp<size_t>(nofile / 2, 16, 16384);
}

// A TCPStore client's first byte is VALIDATE (0) or an older client's request (0..11); HTTP/2 starts
// with "PRI * HTTP/2.0" and TLS with a handshake record (0x16).
bool SpeaksTcpStore(char first_byte) { return static_cast<unsigned char>(first_byte) < 0x10; }

}  // namespace

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const std::string& host, uint16_t port, uint16_t forward_port, std::chrono::milliseconds stalled_client_timeout) {
  DT_ASSIGN_OR_RETURN(UniqueFd listener, BindListener(host, port));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFd wakeup(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll.valid() || !wakeup.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat("store: epoll/eventfd: ", strerror(errno)));
  }
  uint16_t bound = BoundPort(listener.get());
  std::unique_ptr<TcpStoreServer> server(
      new TcpStoreServer(std::move(listener), std::move(epoll), std::move(wakeup), bound, forward_port,
                         stalled_client_timeout));
  server->thread_ = std::thread([s = server.get()] {
    RunGuarded("the workers' store", [s] { s->Serve(); }, [](const absl::Status& st) {
      spdlog::error("{}; the workers' next store call fails and the job ends with their failure",
                    std::string(st.message()));
    });
  });
  return server;
}

TcpStoreServer::TcpStoreServer(UniqueFd listener, UniqueFd epoll, UniqueFd wakeup, uint16_t port,
                               uint16_t forward_port, std::chrono::milliseconds stalled_client_timeout)
    : listener_(std::move(listener)), epoll_(std::move(epoll)), wakeup_(std::move(wakeup)), port_(port),
      forward_port_(forward_port), stalled_client_timeout_(stalled_client_timeout) {}

TcpStoreServer::~TcpStoreServer() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wakeup_.get(), &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::Serve() {
  StoreCore core;
  std::map<int, Connection> conns;  // keyed by fd, which is also the StoreClientId
  std::optional<StreamForwarder> forwarder;
  if (forward_port_ != 0) forwarder.emplace(epoll_.get(), forward_port_);
  Watch(epoll_.get(), listener_.get(), EPOLLIN);
  Watch(epoll_.get(), wakeup_.get(), EPOLLIN);

  const size_t max_conns = MaxConnections();
  bool refusing = false;
  bool listener_paused = false;
  // Connections holding replies their socket did not take: the only ones the stall deadline looks at
  // (a scan of every connection at each wake would cost O(clients) per request).
  std::set<int> backlogged;
  auto close_conn = [&](int fd) {
    core.OnDisconnect(static_cast<StoreClientId>(fd));
    backlogged.erase(fd);
    conns.erase(fd);  // closes the socket, which also removes it from epoll
    if (listener_paused) {
      listener_paused = false;
      Watch(epoll_.get(), listener_.get(), EPOLLIN);
    }
  };
  // Sends what `fd`'s socket takes; reads it only while its requests need not wait for replies to
  // be read (StoreCore's backlog caps).
  auto flush = [&](int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Connection& conn = it->second;
    const size_t held = conn.pending.size();
    conn.pending += core.TakeOutput(static_cast<StoreClientId>(fd));
    const size_t before = conn.pending.size();
    if (!SendPending(fd, conn.pending)) return close_conn(fd);
    if (held == 0 || conn.pending.size() < before) conn.stalled_since = Clock::now();
    if (conn.pending.empty()) {
      backlogged.erase(fd);
    } else {
      backlogged.insert(fd);
    }
    core.SetUnsent(static_cast<StoreClientId>(fd), conn.pending.size());
    conn.paused = core.Waiting(static_cast<StoreClientId>(fd));
    uint32_t events = conn.paused ? 0u : static_cast<uint32_t>(EPOLLIN);
    if (!conn.pending.empty()) events |= EPOLLOUT;
    Watch(epoll_.get(), fd, events);
  };
  // Replies were read (or clients closed): requests that waited run, and their clients are read again.
  auto resume_waiting = [&] {
    if (!core.holds_requests()) return;
    for (StoreClientId id : core.RunUnblocked()) {
      spdlog::warn("store: closing a client that broke the TCPStore protocol: {}", core.last_error());
      close_conn(static_cast<int>(id));
    }
    for (StoreClientId id : core.TakeClientsWithOutput()) flush(static_cast<int>(id));
    std::vector<int> unpaused;  // flush may close a connection: not while iterating
    for (const auto& [fd, conn] : conns) {
      if (conn.paused && !core.Waiting(static_cast<StoreClientId>(fd))) unpaused.push_back(fd);
    }
    for (int fd : unpaused) flush(fd);
  };
  // A client that has read nothing of its replies for the timeout: closed. Returns the next such
  // deadline's wait in ms for epoll_wait (-1: none).
  auto close_stalled = [&]() -> int {
    const Clock::time_point now = Clock::now();
    std::optional<Clock::time_point> next;
    std::vector<int> stalled;
    for (int fd : backlogged) {
      const Clock::time_point deadline = conns[fd].stalled_since + stalled_client_timeout_;
      if (deadline <= now) {
        stalled.push_back(fd);
      } else if (!next || deadline < *next) {
        next = deadline;
      }
    }
    for (int fd : stalled) {
      spdlog::warn("store: closing a client that read none of its {} bytes of replies for {} s", conns[fd].pending.size(),
                   stalled_client_timeout_.count() / 1000.0);
      // A reset, not a FIN queued behind what it never reads: the kernel drops those bytes too.
      linger reset{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      close_conn(fd);
    }
    if (!stalled.empty()) resume_waiting();
    if (!next) return -1;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*next - now).count());
  };

  epoll_event events[64];
  char buf[65536];
  for (;;) {
    int n = ::epoll_wait(epoll_.get(), events, 64, close_stalled());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == wakeup_.get()) return;
      if (forwarder && forwarder->Owns(fd)) {
        forwarder->OnEvent(fd, events[i].events);
        continue;
      }
      if (fd == listener_.get()) {
        int c;
        while ((c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
          if (conns.size() + (forwarder ? forwarder->num_streams() * 2 : 0) >= max_conns) {
            ::close(c);  // keeps file descriptors for the workers' pipes on the next restart
            if (!refusing) spdlog::warn("store: {} connections open; refusing more", max_conns);
            refusing = true;
            continue;
          }
          refusing = false;
          int one = 1;
          ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          conns[c].fd = UniqueFd(c);
          Watch(epoll_.get(), c, EPOLLIN);
        }
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the pending connection would wake us forever. Listen again once
          // a connection has closed.
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
          listener_paused = true;
          spdlog::warn("store: out of file descriptors; not accepting until a connection closes");
        }
        continue;
      }
      if (events[i].events & EPOLLOUT) flush(fd);
      if (!(events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (got > 0 && forwarder) {
        Connection& conn = conns[fd];
        if (!conn.classified && !SpeaksTcpStore(buf[0])) {
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
          forwarder->Forward(std::move(conn.fd), absl::string_view(buf, static_cast<size_t>(got)));
          conns.erase(fd);
          continue;
        }
        conn.classified = true;
      }
      if (got <= 0 || !core.OnData(static_cast<StoreClientId>(fd), absl::string_view(buf, got))) {
        if (got > 0) spdlog::warn("store: closing a client that broke the TCPStore protocol: {}", core.last_error());
        close_conn(fd);
        continue;
      }
      for (StoreClientId id : core.TakeClientsWithOutput()) flush(static_cast<int>(id));
      auto it = conns.find(fd);  // a client that added no output may wait all the same (the total cap)
      if (it != conns.end() && !it->second.paused && core.Waiting(static_cast<StoreClientId>(fd))) flush(fd);
    }
    resume_waiting();  // replies read or clients gone: requests held for them run now
  }
}

}  // namespace dtrun
