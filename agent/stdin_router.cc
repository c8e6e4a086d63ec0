#include "agent/stdin_router.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>

#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

// Whether epoll can watch `fd` (regular files and /dev/null cannot).
bool Pollable(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return false;
  UniqueFd probe(::epoll_create1(EPOLL_CLOEXEC));
  if (!probe.valid()) return false;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  return ::epoll_ctl(probe.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

}  // namespace

StdinRouter::Mode StdinRouter::ModeFor(int input_fd) {
  return Pollable(input_fd) ? Mode::kRouted : Mode::kInherited;
}

void StdinRouter::SetInterest(int fd, uint32_t events, bool& registered) {
  if (events == 0) {
    if (registered) loop_.Unwatch(fd);
    registered = false;
    return;
  }
  if (registered) {
    loop_.SetInterest(fd, events);
  } else {
    registered = loop_.Watch(fd, events, [this, fd](uint32_t ready) { OnEvent(fd, ready); });
  }
}

StdinRouter::StdinRouter(int input_fd, EventLoop& loop, bool input_echoed_elsewhere)
    : mode_(ModeFor(input_fd)), input_fd_(input_fd), loop_(loop) {
  if (mode_ != Mode::kRouted) {
    input_over_ = true;
    return;
  }
  is_terminal_ = ::isatty(input_fd) == 1;
  echoed_ = is_terminal_ || input_echoed_elsewhere;
  // A terminal that another job holds in the foreground is not ours to read (`dtrun ... &`):
  // the workers' stdin stays open and silent, as a background job's would.
  if (is_terminal_ && ::tcgetpgrp(input_fd) != ::getpgrp()) readable_ = false;
  UpdateInterest();
}

StdinRouter::~StdinRouter() {
  SetWorkers({});
  SetInterest(input_fd_, 0, input_registered_);
}

void StdinRouter::OnEvent(int fd, uint32_t events) {
  if (fd == input_fd_) {
    ReadInput();
  } else {
    for (auto& [rank, sink] : sinks_) {
      if (sink.fd.get() == fd) WriteTo(sink);
    }
  }
  Deliver();
}

void StdinRouter::SetWorkers(std::map<int, UniqueFd> fds) {
  for (auto& [rank, sink] : sinks_) SetInterest(sink.fd.get(), 0, sink.registered);
  sinks_.clear();
  prompts_.clear();
  last_prompter_ = kDefaultRank;
  for (auto& [rank, fd] : fds) {
    if (!fd.valid()) continue;
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);  // the loop never blocks
    sinks_[rank].fd = std::move(fd);
  }
  Deliver();
}

void StdinRouter::OnPrompt(int local_rank) {
  if (std::find(prompts_.begin(), prompts_.end(), local_rank) == prompts_.end()) prompts_.push_back(local_rank);
  Deliver();
}

void StdinRouter::ReadInput() {
  // One read per readiness report: dtrun's stdin is shared with the shell, so it stays blocking.
  char buf[65536];
  size_t room = std::min(sizeof(buf), kMaxBuffered - std::min(kMaxBuffered, input_.size()));
  if (room == 0) return;
  ssize_t n = ::read(input_fd_, buf, room);
  if (n > 0) {
    input_.append(buf, static_cast<size_t>(n));
  } else if (n == 0) {
    input_over_ = true;
  } else if (errno == EIO && is_terminal_) {
    readable_ = false;
    spdlog::warn("dtrun is in the background: its terminal input no longer reaches the workers");
  } else if (errno != EINTR && errno != EAGAIN) {
    input_over_ = true;
  }
}

bool StdinRouter::Takes(int rank) const {
  auto it = sinks_.find(rank);
  return it != sinks_.end() && it->second.fd.valid();
}

int StdinRouter::Target() {
  while (!prompts_.empty() && !Takes(prompts_.front())) prompts_.pop_front();
  if (!prompts_.empty()) return prompts_.front();
  if (Takes(last_prompter_)) return last_prompter_;
  if (Takes(kDefaultRank)) return kDefaultRank;
  for (const auto& [rank, sink] : sinks_) {
    if (sink.fd.valid()) return rank;  // the rank that had the input closed its stdin, or exited
  }
  return -1;
}

// The length of the next line of `input`, newline included; 0 if it is not complete yet. All that
// is left counts as one line at the end of input, or when it fills the buffer without a newline.
size_t StdinRouter::LineLength(absl::string_view input) const {
  size_t nl = input.find('\n');
  if (nl != absl::string_view::npos) return nl + 1;
  return (input_over_ || input.size() >= kMaxBuffered) ? input.size() : 0;
}

namespace {
// Where the line holding byte `pos` of `lines` ends (after its newline; the end if it has none).
size_t LineEnd(absl::string_view lines, size_t pos) {
  size_t nl = lines.find('\n', pos);
  return nl == absl::string_view::npos ? lines.size() : nl + 1;
}
}  // namespace

void StdinRouter::Deliver() {
  size_t taken = 0;  // bytes of input_ handed on; erased once, at the end (not once per line)
  for (;;) {
    const absl::string_view rest = absl::string_view(input_).substr(taken);
    size_t len = LineLength(rest);
    if (len == 0) break;
    int target = Target();
    if (target < 0) break;  // between rounds: the next round's workers get it
    Sink& sink = sinks_.at(target);
    if (!sink.pending.empty()) break;  // back-pressure: this worker has not taken its last line
    if (!prompts_.empty() && prompts_.front() == target) {
      prompts_.pop_front();  // a prompt is answered by one line
    } else {
      // No prompt is waiting, so every complete line goes to this rank: one write for all of them
      // (a line per write cost `seq 1 3000000 | dtrun ...` 19 s instead of 0.4).
      size_t last_nl = rest.rfind('\n');
      if (last_nl != absl::string_view::npos) len = std::max(len, last_nl + 1);
    }
    last_prompter_ = target;
    if (echoed_) echoed_line_ = true;
    taken += SendLines(sink, rest.substr(0, len));
  }
  input_.erase(0, taken);
  CloseSinksIfDone();
  UpdateInterest();
}

// Writes what the pipe takes of `lines` now. The line it cut waits in the sink; whole lines it did
// not start stay in the input (a prompt from another rank may come first, as when lines are sent
// one at a time). Returns the bytes of `lines` handed on.
size_t StdinRouter::SendLines(Sink& sink, absl::string_view lines) {
  sink.pending.Append(lines);
  WriteTo(sink);
  if (!sink.fd.valid()) return LineEnd(lines, 0);  // the worker went: its line is dropped, no more
  const size_t written = lines.size() - sink.pending.size();
  if (written == lines.size()) return written;
  const size_t cut = written > 0 && lines[written - 1] == '\n' ? written : LineEnd(lines, written);
  sink.pending.Clear();
  sink.pending.Append(lines.substr(written, cut - written));
  return cut;
}

void StdinRouter::WriteTo(Sink& sink) {
  if (!sink.fd.valid() || sink.pending.WriteTo(sink.fd.get())) return;
  sink.pending.Clear();  // the worker closed its stdin (or exited): the line is dropped
  SetInterest(sink.fd.get(), 0, sink.registered);
  sink.fd.Reset();
}

void StdinRouter::CloseSinksIfDone() {
  if (!input_over_ || !input_.empty()) return;
  for (auto& [rank, sink] : sinks_) {
    if (sink.pending.empty() && sink.fd.valid()) {
      SetInterest(sink.fd.get(), 0, sink.registered);
      sink.fd.Reset();  // end of input reaches the worker
    }
  }
}

void StdinRouter::UpdateInterest() {
  if (mode_ != Mode::kRouted) return;
  const bool want_input = readable_ && !input_over_ && input_.size() < kMaxBuffered;
  SetInterest(input_fd_, want_input ? static_cast<uint32_t>(EPOLLIN) : 0u, input_registered_);
  for (auto& [rank, sink] : sinks_) {
    if (sink.fd.valid()) SetInterest(sink.fd.get(), sink.pending.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT), sink.registered);
  }
}

}  // namespace dtrun
