#include "agent/tcp_store_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
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
#include "base/open_file_limit.h"
#include "base/outbox.h"
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
  Outbox pending;
  // While `pending` is not empty: the period being judged (SlowClientRule), and what the socket
  // took of it so far.
  Clock::time_point period_start;
  uint64_t taken_in_period = 0;
  bool paused = false;              // not read: its requests wait for its replies to be read
  bool classified = false;          // its first byte has been seen
  uint32_t watched = EPOLLIN;       // the events epoll reports for it (a flush changes them only when they differ)
};

// A TCPStore client's first byte is VALIDATE (0) or an older client's request (0..11); HTTP/2 starts
// with "PRI * HTTP/2.0" and TLS with a handshake record (0x16).
bool SpeaksTcpStore(char first_byte) { return static_cast<unsigned char>(first_byte) < 0x10; }

// The server's thread: the store's state and every connection, touched by this thread alone.
class StoreLoop {
 public:
  StoreLoop(int epoll, int listener, int wakeup, uint16_t forward_port, SlowClientRule slow_client,
            std::function<void(int fd)> hand_off, size_t open_file_limit)
      : epoll_(epoll),
        listener_(listener),
        wakeup_(wakeup),
        slow_client_(slow_client),
        open_file_limit_(open_file_limit),
        max_conns_(StoreConnectionCap(open_file_limit)),
        hand_off_(std::move(hand_off)) {
    if (forward_port != 0 && !hand_off_) forwarder_.emplace(epoll_, forward_port);
    Watch(epoll_, listener_, EPOLLIN);
    Watch(epoll_, wakeup_, EPOLLIN);
  }
  // Until the wakeup eventfd is readable (the server's destructor), or epoll fails.
  void Run();

 private:
  static StoreClientId Id(int fd) { return static_cast<StoreClientId>(fd); }  // the fd is the id
  void Accept();
  void OnClientEvent(int fd, uint32_t events);
  // A new connection whose first byte (peeked, not read) is no TCPStore request goes to
  // hand_off_; true if it went.
  bool HandedOff(int fd);
  void Close(int fd);
  void Flush(int fd);
  void ResumeWaiting();
  int CloseSlowClients();

  const int epoll_;
  const int listener_;
  const int wakeup_;
  const SlowClientRule slow_client_;
  const size_t open_file_limit_;
  const size_t max_conns_;
  StoreCore core_;
  std::map<int, Connection> conns_;  // keyed by fd
  std::optional<StreamForwarder> forwarder_;
  const std::function<void(int fd)> hand_off_;
  // Connections holding replies their socket did not take: the only ones the stall deadline looks
  // at (a scan of every connection at each wake would cost O(clients) per request).
  std::set<int> backlogged_;
  bool refusing_ = false;         // at max_conns_: said once until a connection is taken again
  bool listener_paused_ = false;  // out of descriptors: not accepting until a connection closes
  char buf_[65536];
};

void StoreLoop::Run() {
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_, events, 64, CloseSlowClients());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wakeup_) return;
      if (forwarder_ && forwarder_->Owns(fd)) {
        forwarder_->OnEvent(fd, events[i].events);
      } else if (fd == listener_) {
        Accept();
      } else {
        OnClientEvent(fd, events[i].events);
      }
    }
    ResumeWaiting();  // replies read or clients gone: requests held for them run now
  }
}

void StoreLoop::Accept() {
  int c;
  while ((c = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    if (conns_.size() + (forwarder_ ? forwarder_->num_streams() * 2 : 0) >= max_conns_) {
      ::close(c);  // keeps file descriptors for the workers' pipes on the next restart
      if (!refusing_) {
        spdlog::error(
            "store: refusing connections past {} (half of this process's limit of {} open files): a job of more "
            "workers needs a higher hard limit on this host ({})",
            max_conns_, open_file_limit_, kRaiseOpenFileLimit);
      }
      refusing_ = true;
      continue;
    }
    refusing_ = false;
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conns_[c].fd = UniqueFd(c);
    Watch(epoll_, c, EPOLLIN);
  }
  if (errno == EMFILE || errno == ENFILE) {
    // Out of descriptors: the pending connection would wake us forever. Listen again once a
    // connection has closed.
    ::epoll_ctl(epoll_, EPOLL_CTL_DEL, listener_, nullptr);
    listener_paused_ = true;
    spdlog::warn("store: out of file descriptors; not accepting until a connection closes");
  }
}

void StoreLoop::OnClientEvent(int fd, uint32_t events) {
  if (conns_.find(fd) == conns_.end()) return;  // closed by an earlier event of this wake
  if (events & EPOLLOUT) Flush(fd);
  if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)) || conns_.find(fd) == conns_.end()) return;
  if (HandedOff(fd)) return;
  ssize_t got = ::recv(fd, buf_, sizeof(buf_), 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (got > 0 && forwarder_) {
    Connection& conn = conns_[fd];
    if (!conn.classified && !SpeaksTcpStore(buf_[0])) {
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
      forwarder_->Forward(std::move(conn.fd), absl::string_view(buf_, static_cast<size_t>(got)));
      conns_.erase(fd);
      return;
    }
    conn.classified = true;
  }
  if (got <= 0 || !core_.OnData(Id(fd), absl::string_view(buf_, static_cast<size_t>(got)))) {
    if (got > 0) spdlog::warn("store: closing a client that broke the TCPStore protocol: {}", core_.last_error());
    Close(fd);
    return;
  }
  for (StoreClientId id : core_.TakeClientsWithOutput()) Flush(static_cast<int>(id));
  auto it = conns_.find(fd);  // a client that added no output may wait all the same (the total cap)
  if (it != conns_.end() && !it->second.paused && core_.Waiting(Id(fd))) Flush(fd);
}

bool StoreLoop::HandedOff(int fd) {
  if (!hand_off_) return false;
  Connection& conn = conns_[fd];
  if (conn.classified) return false;
  char first = 0;
  if (::recv(fd, &first, 1, MSG_PEEK) != 1) return false;  // closed or failed: recv() below says which
  conn.classified = true;
  if (SpeaksTcpStore(first)) return false;
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
  const int handed = conn.fd.Release();
  conns_.erase(fd);
  hand_off_(handed);
  return true;
}

void StoreLoop::Close(int fd) {
  core_.OnDisconnect(Id(fd));
  backlogged_.erase(fd);
  conns_.erase(fd);  // closes the socket, which also removes it from epoll
  if (listener_paused_) {
    listener_paused_ = false;
    Watch(epoll_, listener_, EPOLLIN);
  }
}

// Sends what `fd`'s socket takes; reads it only while its requests need not wait for replies to be
// read (StoreCore's backlog caps).
void StoreLoop::Flush(int fd) {
  auto it = conns_.find(fd);
  if (it == conns_.end()) return;
  Connection& conn = it->second;
  const size_t held = conn.pending.size();
  conn.pending.Append(core_.TakeOutput(Id(fd)));
  const size_t before = conn.pending.size();
  if (!conn.pending.SendTo(fd)) return Close(fd);
  if (held == 0) {
    conn.period_start = Clock::now();
    conn.taken_in_period = 0;
  } else {
    conn.taken_in_period += before - conn.pending.size();
  }
  if (conn.pending.empty()) {
    backlogged_.erase(fd);
  } else {
    backlogged_.insert(fd);
  }
  core_.SetUnsent(Id(fd), conn.pending.size());
  conn.paused = core_.Waiting(Id(fd));
  uint32_t events = conn.paused ? 0u : static_cast<uint32_t>(EPOLLIN);
  if (!conn.pending.empty()) events |= EPOLLOUT;
  if (events == conn.watched) return;  // the common case, a reply sent whole: no system call
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  ::epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &ev);
  conn.watched = events;
}

// Replies were read (or clients closed): requests that waited run, and their clients are read again.
// Until none can run: a flush here may send a client's new replies whole (its reader keeps up),
// and then no event would come to run the requests it still holds.
void StoreLoop::ResumeWaiting() {
  if (!core_.holds_requests()) return;
  while (core_.CanRunHeld()) {
    for (StoreClientId id : core_.RunUnblocked()) {
      spdlog::warn("store: closing a client that broke the TCPStore protocol: {}", core_.last_error());
      Close(static_cast<int>(id));
    }
    for (StoreClientId id : core_.TakeClientsWithOutput()) Flush(static_cast<int>(id));
  }
  std::vector<int> unpaused;  // Flush may close a connection: not while iterating
  for (const auto& [fd, conn] : conns_) {
    if (conn.paused && !core_.Waiting(Id(fd))) unpaused.push_back(fd);
  }
  for (int fd : unpaused) Flush(fd);
}

// Judges each backlogged client whose period is over: one that took its floor starts another, one
// that did not is closed. Returns the wait in ms until the next period ends, for epoll_wait (-1: none).
int StoreLoop::CloseSlowClients() {
  const Clock::time_point now = Clock::now();
  std::optional<Clock::time_point> next;
  std::vector<int> slow;
  for (int fd : backlogged_) {
    Connection& conn = conns_[fd];
    if (conn.period_start + slow_client_.period <= now) {
      if (conn.taken_in_period < slow_client_.min_bytes) {
        slow.push_back(fd);
        continue;
      }
      conn.period_start = now;
      conn.taken_in_period = 0;
    }
    const Clock::time_point end = conn.period_start + slow_client_.period;
    if (!next || end < *next) next = end;
  }
  for (int fd : slow) {
    spdlog::warn(
        "store: closing a client that took {} of its {} bytes of replies in {} s (the floor is {} bytes, or all)",
        conns_[fd].taken_in_period, conns_[fd].pending.size(), slow_client_.period.count() / 1000.0,
        slow_client_.min_bytes);
    // A reset, not a FIN queued behind what it never reads: the kernel drops those bytes too.
    linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    Close(fd);
  }
  if (!slow.empty()) ResumeWaiting();
  if (!next) return -1;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*next - now).count());
}

}  // namespace

size_t StoreConnectionCap(size_t open_file_limit) { return std::max<size_t>(open_file_limit / 2, 16); }

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, uint16_t port,
                                                                      uint16_t forward_port, SlowClientRule slow_client,
                                                                      std::function<void(int fd)> hand_off) {
  DT_ASSIGN_OR_RETURN(UniqueFd listener, BindListener(host, port));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFd wakeup(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll.valid() || !wakeup.valid()) {
    return absl::ResourceExhaustedError(absl::StrCat("store: epoll/eventfd: ", strerror(errno)));
  }
  uint16_t bound = BoundPort(listener.get());
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(std::move(listener), std::move(epoll), std::move(wakeup),
                                                            bound, forward_port, slow_client, std::move(hand_off),
                                                            OpenFileLimit()));
  server->thread_ = std::thread([s = server.get()] {
    RunGuarded("the workers' store", [s] { s->Serve(); }, [](const absl::Status& st) {
      spdlog::error("{}; the workers' next store call fails and the job ends with their failure",
                    std::string(st.message()));
    });
  });
  return server;
}

TcpStoreServer::TcpStoreServer(UniqueFd listener, UniqueFd epoll, UniqueFd wakeup, uint16_t port, uint16_t forward_port,
                               SlowClientRule slow_client, std::function<void(int fd)> hand_off, size_t open_file_limit)
    : listener_(std::move(listener)),
      epoll_(std::move(epoll)),
      wakeup_(std::move(wakeup)),
      port_(port),
      forward_port_(forward_port),
      slow_client_(slow_client),
      hand_off_(std::move(hand_off)),
      open_file_limit_(open_file_limit) {}

TcpStoreServer::~TcpStoreServer() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wakeup_.get(), &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
}

void TcpStoreServer::Serve() {
  StoreLoop(epoll_.get(), listener_.get(), wakeup_.get(), forward_port_, slow_client_, hand_off_, open_file_limit_)
      .Run();
}

}  // namespace dtrun
