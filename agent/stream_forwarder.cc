#include "agent/stream_forwarder.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/cord_buffer.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

UniqueFd ConnectLoopback(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return fd;
  int one = 1;  // gRPC's small frames must not wait for Nagle's algorithm on the relay's hop
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    return UniqueFd();
  }
  return fd;
}

}  // namespace

StreamForwarder::StreamForwarder(int epoll_fd, uint16_t upstream_port)
    : epoll_fd_(epoll_fd), upstream_port_(upstream_port) {}

StreamForwarder::~StreamForwarder() {
  while (!by_fd_.empty()) {
    std::shared_ptr<Stream> s = by_fd_.begin()->second;
    Close(*s);
  }
}

void StreamForwarder::Forward(UniqueFd client, absl::string_view head) {
  UniqueFd upstream = ConnectLoopback(upstream_port_);
  if (!upstream.valid()) {
    spdlog::warn("rendezvous: cannot reach the local service on port {}: {}", upstream_port_, strerror(errno));
    return;  // closes the client
  }
  auto s = std::make_shared<Stream>();
  s->sides[0].fd = std::move(client);
  s->sides[1].fd = std::move(upstream);
  s->sides[1].outbox.Append(head);
  for (Side& side : s->sides) {
    epoll_event ev{};
    ev.data.fd = side.fd.get();
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, side.fd.get(), &ev);
    by_fd_[side.fd.get()] = s;
  }
  UpdateInterest(*s);
}

void StreamForwarder::OnEvent(int fd, uint32_t events) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  std::shared_ptr<Stream> s = it->second;
  const bool upstream = s->sides[1].fd.get() == fd;
  if (upstream && !s->connected) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      spdlog::warn("rendezvous: cannot reach the local service on port {}: {}", upstream_port_, strerror(err));
      return Close(*s);
    }
    s->connected = true;
  }
  Pump(*s);
  // A side that hung up entirely (or failed) ends the stream once what could be passed on was.
  if ((events & (EPOLLHUP | EPOLLERR)) && by_fd_.count(fd)) Close(*s);
}

void StreamForwarder::Pump(Stream& s) {
  for (int i = 0; i < 2; ++i) {
    Side& from = s.sides[i];
    Side& to = s.sides[1 - i];
    if (i == 1 && !s.connected) continue;
    while (!from.read_done && to.outbox.size() < kMaxBuffered) {
      // Received straight into a block the outbox then holds: a bulk stream through the relay
      // (a buddy copy of a snapshot, to the rendezvous host) is copied in and out, not also between.
      absl::CordBuffer block =
          absl::CordBuffer::CreateWithCustomLimit(absl::CordBuffer::kCustomLimit, kMaxBuffered - to.outbox.size());
      absl::Span<char> room = block.available();
      ssize_t n = ::recv(from.fd.get(), room.data(), room.size(), 0);
      if (n > 0) {
        const size_t got = static_cast<size_t>(n);
        // A block at most half empty is kept; fewer bytes are copied out of it, so that a peer
        // trickling small reads cannot make kMaxBuffered of data hold far more memory in blocks.
        if (2 * got >= block.capacity()) {
          block.IncreaseLengthBy(got);
          to.outbox.Append(std::move(block));
        } else {
          to.outbox.Append(absl::string_view(room.data(), got));
        }
      } else if (n == 0) {
        from.read_done = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno == EAGAIN) {
        break;
      } else {
        return Close(s);
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    Side& to = s.sides[i];
    if (i == 1 && !s.connected) continue;
    if (!to.outbox.SendTo(to.fd.get())) return Close(s);
    if (s.sides[1 - i].read_done && to.outbox.empty() && !to.write_shut) {
      ::shutdown(to.fd.get(), SHUT_WR);  // pass the half-close on
      to.write_shut = true;
    }
  }
  if (s.sides[0].write_shut && s.sides[1].write_shut) return Close(s);
  UpdateInterest(s);
}

void StreamForwarder::UpdateInterest(Stream& s) {
  for (int i = 0; i < 2; ++i) {
    const Side& side = s.sides[i];
    uint32_t events = 0;
    const bool usable = i == 0 || s.connected;
    if (usable && !side.read_done && s.sides[1 - i].outbox.size() < kMaxBuffered) events |= EPOLLIN;
    if (!side.outbox.empty() || !usable) events |= EPOLLOUT;
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = side.fd.get();
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, side.fd.get(), &ev);
  }
}

void StreamForwarder::Close(Stream& s) {
  for (Side& side : s.sides) {
    if (!side.fd.valid()) continue;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, side.fd.get(), nullptr);
    by_fd_.erase(side.fd.get());
    side.fd.Reset();
  }
}

}  // namespace dtrun
