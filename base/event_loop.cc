#include "base/event_loop.h"

#include <errno.h>
#include <string.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dtrun {
namespace {

// epoll's user data: the fd in the low half, its registration's generation in the high half.
uint64_t Tag(int fd, uint64_t generation) { return (generation << 32) | static_cast<uint32_t>(fd); }

}  // namespace

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create(std::function<Clock::time_point()> now) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot create an epoll set: ", strerror(errno), "; raise the open-files limit (ulimit -n)"));
  }
  return std::unique_ptr<EventLoop>(new EventLoop(std::move(epoll), std::move(now)));
}

bool EventLoop::Apply(int fd, Registration& r, uint32_t events) {
  if (events == 0) {
    if (r.in_epoll) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
    r.in_epoll = false;
    r.events = 0;
    return true;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = Tag(fd, r.generation);
  if (::epoll_ctl(epoll_.get(), r.in_epoll ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) return false;
  r.in_epoll = true;
  r.events = events;
  return true;
}

bool EventLoop::Watch(int fd, uint32_t events, Handler handler) {
  Unwatch(fd);
  Registration r{next_generation_++, 0, false, std::move(handler)};
  if (!Apply(fd, r, events)) return false;
  handlers_.emplace(fd, std::move(r));
  return true;
}

bool EventLoop::SetInterest(int fd, uint32_t events) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end()) {
    errno = EBADF;
    return false;
  }
  return it->second.events == events || Apply(fd, it->second, events);
}

void EventLoop::Unwatch(int fd) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end()) return;
  Apply(fd, it->second, 0);
  handlers_.erase(it);
}

int EventLoop::RunOnce(std::optional<Clock::time_point> deadline) {
  int timeout_ms = -1;
  if (deadline) {
    // Rounded up: a wake-up just before the deadline would find nothing due and wait again.
    const auto left = *deadline - now_();
    timeout_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::ceil<std::chrono::milliseconds>(left).count(), 0, 24 * 3600 * 1000));
  }
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = static_cast<int>(static_cast<uint32_t>(events[i].data.u64));
    auto it = handlers_.find(fd);
    if (it == handlers_.end() || Tag(fd, it->second.generation) != events[i].data.u64) continue;
    // A copy: the handler may unwatch its own fd, which destroys the stored one.
    Handler handler = it->second.handler;
    handler(events[i].events);
    ++ran;
  }
  return ran;
}

}  // namespace dtrun
