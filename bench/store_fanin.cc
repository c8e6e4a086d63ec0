// Every worker of a large job against one TCPStore: the connections, the init barrier, and a
// job that dies while all its workers wait.
//   store_fanin --port P --clients N [--mode barrier|abandon] [--timeout-s 300]
// Each client is its own socket speaking LibTorch 1.13's numbering (Debian's torch), driven from
// one epoll loop. Clients take source addresses 127.0.0.2, .3, ... (20,000 each) so that one
// machine can open more connections than one address has ephemeral ports.
//   barrier: each client sends ADD(count, 1) and WAIT(go) in one write; the client whose ADD
//     answers N SETs go; then every client GETs go (the shape of a process group's init).
//   abandon: each client sends ADD(count, 1) and WAIT(never); once every ADD is answered (so every
//     WAIT is registered), all close at once, and a new client's GET times how long the store
//     takes to serve again (what a restarted job's first store call waits).
// Prints one JSON line; exits 1 if some client failed or the timeout passed.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kSet = 0, kGet = 2, kAdd = 3, kWait = 5;  // LibTorch 1.13's numbering
constexpr int kClientsPerSource = 20000;
constexpr int kMaxConnectTries = 20;

std::string U64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof(v)); }
std::string Str(const std::string& s) { return U64(s.size()) + s; }
std::string Add(const std::string& key, int64_t delta) {
  return std::string(1, static_cast<char>(kAdd)) + Str(key) + U64(static_cast<uint64_t>(delta));
}
std::string Wait(const std::string& key) { return std::string(1, static_cast<char>(kWait)) + U64(1) + Str(key); }
std::string Set(const std::string& key, const std::string& v) {
  return std::string(1, static_cast<char>(kSet)) + Str(key) + Str(v);
}
std::string Get(const std::string& key) { return std::string(1, static_cast<char>(kGet)) + Str(key); }

enum class State { kConnecting, kAwaitAdd, kAwaitStop, kAwaitGet, kDone, kFailed };

struct Client {
  int fd = -1;
  int tries = 0;
  State state = State::kConnecting;
  std::string in;
};

struct Flags {
  int port = 0;
  int clients = 1000;
  std::string mode = "barrier";
  int timeout_s = 300;
  std::string prefix = "fanin" + std::to_string(::getpid()) + "/";  // a run's own keys on a reused store
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--port")
      f.port = std::atoi(v.c_str());
    else if (k == "--clients")
      f.clients = std::atoi(v.c_str());
    else if (k == "--mode")
      f.mode = v;
    else if (k == "--timeout-s")
      f.timeout_s = std::atoi(v.c_str());
    else
      return false;
  }
  return f.port > 0 && f.clients > 0 && (f.mode == "barrier" || f.mode == "abandon") && f.timeout_s > 0;
}

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class Driver {
 public:
  Driver(const Flags& f) : f_(f), clients_(static_cast<size_t>(f.clients)), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {}

  // Returns false on a failed client or the timeout.
  bool Run() {
    start_ = Clock::now();
    for (int i = 0; i < f_.clients; ++i) Connect(i);
    const Clock::time_point deadline = start_ + std::chrono::seconds(f_.timeout_s);
    while (finished_ + failed_ < f_.clients) {
      if (Clock::now() > deadline) return timed_out_ = true, false;
      if (failed_ > 0 && added_ + failed_ >= f_.clients) return false;  // the barrier can never complete
      Poll(1000);
    }
    if (failed_ > 0) return false;
    if (f_.mode == "abandon") return Abandon(deadline);
    return true;
  }

  void Report() const {
    std::printf(
        "{\"mode\": \"%s\", \"clients\": %d, \"failed\": %d, \"connect_retries\": %d, \"timed_out\": %s, "
        "\"connected_s\": %.3f, \"added_s\": %.3f, \"done_s\": %.3f, \"released_s\": %.3f, "
        "\"serving_again_s\": %.3f}\n",
        f_.mode.c_str(), f_.clients, failed_, retries_, timed_out_ ? "true" : "false", connected_s_, added_s_, done_s_,
        released_s_, serving_again_s_);
  }

 private:
  void Connect(int i) {
    Client& c = clients_[static_cast<size_t>(i)];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) return Fail(i, strerror(errno));
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in src{};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + static_cast<uint32_t>(i / kClientsPerSource));
    if (::bind(c.fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return Fail(i, strerror(errno));
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(static_cast<uint16_t>(f_.port));
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0 && errno != EINPROGRESS) {
      return Retry(i);
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev);
  }

  void Retry(int i) {
    Client& c = clients_[static_cast<size_t>(i)];
    ::close(c.fd);
    c.fd = -1;
    if (++c.tries >= kMaxConnectTries) return Fail(i, "connect: refused or timed out 20 times");
    ++retries_;
    Connect(i);
  }

  void Fail(int i, const char* what) {
    Client& c = clients_[static_cast<size_t>(i)];
    if (failed_ == 0) std::fprintf(stderr, "client %d: %s\n", i, what);
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
    c.state = State::kFailed;
    ++failed_;
  }

  void Send(int i, const std::string& bytes) {
    // Requests are a few dozen bytes into an empty socket buffer: send takes them whole.
    if (::send(clients_[static_cast<size_t>(i)].fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(bytes.size())) {
      Fail(i, strerror(errno));
    }
  }

  void Poll(int timeout_ms) {
    epoll_event events[256];
    int n = ::epoll_wait(epoll_, events, 256, timeout_ms);
    for (int e = 0; e < n; ++e) OnEvent(static_cast<int>(events[e].data.u32), events[e].events);
  }

  void OnEvent(int i, uint32_t events) {
    Client& c = clients_[static_cast<size_t>(i)];
    if (c.state == State::kConnecting) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0 || (events & (EPOLLERR | EPOLLHUP))) return Retry(i);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u32 = static_cast<uint32_t>(i);
      ::epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
      if (++connected_ == f_.clients) connected_s_ = Since(start_);
      c.state = State::kAwaitAdd;
      Send(i, Add(f_.prefix + "count", 1) + Wait(f_.mode == "barrier" ? f_.prefix + "go" : f_.prefix + "never"));
      return;
    }
    char buf[64];
    ssize_t got = ::recv(c.fd, buf, sizeof(buf), 0);
    if (got < 0 && errno == EAGAIN) return;
    if (got <= 0) return Fail(i, got == 0 ? "closed by the store" : strerror(errno));
    c.in.append(buf, static_cast<size_t>(got));
    Advance(i);
  }

  void Advance(int i) {
    Client& c = clients_[static_cast<size_t>(i)];
    if (c.state == State::kAwaitAdd && c.in.size() >= 8) {
      int64_t count = 0;
      memcpy(&count, c.in.data(), 8);
      c.in.erase(0, 8);
      c.state = State::kAwaitStop;
      if (++added_ == f_.clients) added_s_ = Since(start_);
      if (f_.mode == "abandon") {
        ++finished_;
        return;
      }
      if (count == f_.clients) {
        released_at_ = Clock::now();
        Send(i, Set(f_.prefix + "go", "1"));
      }
    }
    if (c.state == State::kAwaitStop && !c.in.empty()) {
      c.in.erase(0, 1);
      c.state = State::kAwaitGet;
      Send(i, Get(f_.prefix + "go"));
    }
    if (c.state == State::kAwaitGet && c.in.size() >= 9) {
      c.state = State::kDone;
      ::close(c.fd);
      c.fd = -1;
      if (++finished_ == f_.clients) {
        done_s_ = Since(start_);
        released_s_ = std::chrono::duration<double>(Clock::now() - released_at_).count();
      }
    }
  }

  // Every client waits on a key nobody sets: all close at once, then one more asks the store.
  bool Abandon(Clock::time_point deadline) {
    for (Client& c : clients_) {
      ::close(c.fd);
      c.fd = -1;
    }
    const Clock::time_point closed = Clock::now();
    clients_.resize(clients_.size() + 1);
    const int probe = static_cast<int>(clients_.size()) - 1;
    Connect(probe);
    Client& p = clients_.back();
    while (p.state == State::kConnecting && Clock::now() < deadline) Poll(1000);
    if (p.state != State::kAwaitAdd) return timed_out_ = true, false;
    // ADD and WAIT went out on connect: WAIT(never) would block; the ADD's answer is what we time.
    while (p.state == State::kAwaitAdd && Clock::now() < deadline) Poll(1000);
    if (p.state == State::kAwaitAdd) return timed_out_ = true, false;
    serving_again_s_ = std::chrono::duration<double>(Clock::now() - closed).count();
    return true;
  }

  const Flags f_;
  std::vector<Client> clients_;
  const int epoll_;
  Clock::time_point start_, released_at_;
  int connected_ = 0, added_ = 0, finished_ = 0, failed_ = 0, retries_ = 0;
  bool timed_out_ = false;
  double connected_s_ = 0, added_s_ = 0, done_s_ = 0, released_s_ = 0, serving_again_s_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, f)) {
    std::fprintf(stderr, "usage: store_fanin --port P --clients N [--mode barrier|abandon] [--timeout-s 300]\n");
    return 2;
  }
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < static_cast<rlim_t>(f.clients) + 64) {
    std::fprintf(stderr, "store_fanin: %d clients need more descriptors than the limit %llu (raise ulimit -Hn)\n",
                 f.clients, static_cast<unsigned long long>(lim.rlim_cur));
    return 2;
  }
  Driver driver(f);
  const bool ok = driver.Run();
  driver.Report();
  return ok ? 0 : 1;
}
