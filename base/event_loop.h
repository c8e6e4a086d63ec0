// One epoll set that calls a handler per file descriptor: the loop a single-threaded process runs
// instead of a chain of "is it this fd?" tests. A handler may watch, re-arm or unwatch any fd,
// itself included; an fd unwatched (or re-watched with a new handler) during a wake-up does not
// get the events that wake-up read for its old registration. Not thread-safe: one thread drives it.
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace dtrun {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;
  using Handler = std::function<void(uint32_t events)>;  // EPOLLIN, EPOLLOUT, EPOLLHUP, ...

  // `now` is the clock deadlines are measured on (tests inject theirs).
  static absl::StatusOr<std::unique_ptr<EventLoop>> Create(std::function<Clock::time_point()> now);

  // Calls `handler` whenever `fd` is ready for `events` (e.g. EPOLLIN; 0 keeps the handler with the
  // fd out of the epoll set). Replaces an earlier registration of `fd`. False (errno set) if epoll
  // refuses the fd (a regular file, the open-files limit).
  bool Watch(int fd, uint32_t events, Handler handler);
  // Changes what a watched fd waits for, keeping its handler (0: none; e.g. back-pressure).
  bool SetInterest(int fd, uint32_t events);
  // Forgets `fd`. Call before closing it; unknown fds are ignored.
  void Unwatch(int fd);
  bool watching(int fd) const { return handlers_.count(fd) > 0; }

  // Waits until a watched fd is ready or `deadline` passes (none: no limit), then runs the ready
  // fds' handlers. Returns how many ran; EINTR counts as a wake-up with none.
  int RunOnce(std::optional<Clock::time_point> deadline);

  Clock::time_point now() const { return now_(); }

 private:
  struct Registration {
    uint64_t generation;  // tells a stale ready event from the fd's current registration
    uint32_t events;
    bool in_epoll;
    Handler handler;
  };
  EventLoop(UniqueFd epoll, std::function<Clock::time_point()> now) : epoll_(std::move(epoll)), now_(std::move(now)) {}
  bool Apply(int fd, Registration& r, uint32_t events);

  UniqueFd epoll_;
  std::function<Clock::time_point()> now_;
  std::unordered_map<int, Registration> handlers_;
  uint64_t next_generation_ = 1;
};

}  // namespace dtrun
