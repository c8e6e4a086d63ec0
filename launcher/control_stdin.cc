#include "launcher/control_stdin.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/guarded_thread.h"
#include "base/outbox.h"
#include "base/signal_names.h"
#include "base/unique_fd.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

// Lines from the control fd; bytes past a line wait for the next call.
class ControlReader {
 public:
  explicit ControlReader(UniqueFd fd) : fd_(std::move(fd)) {}

  int fd() const { return fd_.get(); }

  // A whole line already read, without its newline.
  std::optional<std::string> TakeLine() {
    if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (buffer_.size() > kMaxControlLine) {  // no line this long is sent: what follows is not ours
      spdlog::warn("the launching dtrun's control channel (stdin) sent {} bytes without a line end; ignored",
                   buffer_.size());
      buffer_.clear();
    }
    return std::nullopt;
  }

  // One read of what the fd has. False at end of input or on an error.
  bool Fill() {
    char chunk[kMaxControlLine];
    ssize_t n;
    do {
      n = ::read(fd_.get(), chunk, sizeof(chunk));
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == EAGAIN) return true;
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  // The next line; nullopt at end of input, on an error, or after `timeout_ms` (-1: none).
  std::optional<std::string> Next(int timeout_ms) {
    for (;;) {
      if (std::optional<std::string> line = TakeLine()) return line;
      pollfd p{fd_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, timeout_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || !Fill()) return std::nullopt;
    }
  }

 private:
  UniqueFd fd_;
  std::string buffer_;
};

// Acts on the control lines and feeds the workers' input pipe. Neither blocks the other: a signal
// line gets through while the workers leave their input unread.
class ControlChannel {
 public:
  ControlChannel(ControlReader reader, UniqueFd input) : reader_(std::move(reader)), input_(std::move(input)) {}

  void Run() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, nullptr);  // kill() below goes to the agent's signalfd
    for (;;) {
      while (std::optional<std::string> line = reader_.TakeLine()) Act(ParseControlLine(*line));
      pollfd fds[2] = {{reader_.fd(), POLLIN, 0},
                       {input_.get(), static_cast<short>(pending_.empty() ? 0 : POLLOUT), 0}};
      int ready = ::poll(fds, input_.valid() ? 2 : 1, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) break;
      if (input_.valid() && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
        input_.Reset();  // the read end is gone
        pending_.Clear();
      } else if (input_.valid() && fds[1].revents != 0) {
        FeedInput();
      }
      if (fds[0].revents != 0 && !reader_.Fill()) break;
    }
    input_.Reset();
    spdlog::warn("the connection to the launching dtrun (its ssh) closed; stopping this host's workers");
    ::kill(::getpid(), SIGTERM);
  }

 private:
  void Act(const ControlLine& c) {
    switch (c.kind) {
      case ControlLine::Kind::kSignal:
        ::kill(::getpid(), c.signal);
        return;
      case ControlLine::Kind::kInput:
        if (!input_.valid() || input_over_) return;  // the workers' stdin is closed: nobody reads it
        if (pending_.size() + c.input.size() > kMaxHeldInput) {
          if (dropped_ == 0) {
            spdlog::warn("this host's workers have not read {} bytes of their input; dropping what comes next",
                         pending_.size());
          }
          dropped_ += c.input.size();
          return;
        }
        pending_.Append(c.input);
        FeedInput();
        return;
      case ControlLine::Kind::kInputEnd:
        input_over_ = true;
        FeedInput();
        return;
      default:
        spdlog::warn("the launching dtrun's control channel (stdin) sent a line dtrun does not know; ignored");
    }
  }

  void FeedInput() {
    if (!input_.valid()) return;
    if (!pending_.WriteTo(input_.get())) {  // dtrun's stdin was closed: nobody reads input
      pending_.Clear();
      input_.Reset();
    } else if (pending_.empty() && input_over_) {
      input_.Reset();  // the end of input reaches the workers
    }
  }

  ControlReader reader_;
  UniqueFd input_;       // the write end of this dtrun's stdin pipe
  Outbox pending_;       // input the pipe has not taken yet
  bool input_over_ = false;
  size_t dropped_ = 0;
};

}  // namespace

ControlLine ParseControlLine(absl::string_view line) {
  ControlLine c;
  absl::ConsumeSuffix(&line, "\r");
  if (absl::ConsumePrefix(&line, "token ")) {
    c.kind = ControlLine::Kind::kToken;
    c.token = std::string(line);
  } else if (absl::ConsumePrefix(&line, "signal ")) {
    absl::StatusOr<int> s = ParseSignal(line);
    if (s.ok() && (*s == SIGINT || *s == SIGTERM || *s == SIGHUP || *s == SIGQUIT)) {
      c.kind = ControlLine::Kind::kSignal;
      c.signal = *s;
    }
  } else if (absl::ConsumePrefix(&line, "input ")) {
    if (absl::CUnescape(line, &c.input) && !c.input.empty() && c.input.size() <= kMaxInputChunk) {
      c.kind = ControlLine::Kind::kInput;
    }
  } else if (line == "input-end") {
    c.kind = ControlLine::Kind::kInputEnd;
  } else if (line == "stdin terminal") {
    c.kind = ControlLine::Kind::kStdinTerminal;
  }
  return c;
}

std::string InputLine(absl::string_view bytes) { return absl::StrCat("input ", absl::CEscape(bytes), "\n"); }

absl::StatusOr<ControlStart> TakeControlStdin(std::chrono::milliseconds timeout) {
  UniqueFd control(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  absl::StatusOr<Pipe> input = MakePipe(/*nonblocking_read=*/false);
  if (!control.valid() || !input.ok() || ::dup2(input->read.get(), STDIN_FILENO) < 0 ||
      ::fcntl(input->write.get(), F_SETFL, O_NONBLOCK) != 0) {
    return absl::InternalError("cannot take stdin as the launching dtrun's control channel (pipe/dup2 failed)");
  }
  input->read.Reset();  // fd 0 is the read end now
  ControlReader reader(std::move(control));
  ControlStart start;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ControlLine c;
  for (int lines = 0; lines < 2; ++lines) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    std::optional<std::string> line = reader.Next(static_cast<int>(std::max<int64_t>(0, left.count())));
    c = line ? ParseControlLine(*line) : ControlLine{};
    if (c.kind != ControlLine::Kind::kStdinTerminal) break;
    start.input_echoed = true;
  }
  if (c.kind != ControlLine::Kind::kToken) {
    return absl::InvalidArgumentError(absl::StrCat(
        kControlStdinFlag, " is for a dtrun started by dtrun -H: its stdin did not begin with the token within ",
        timeout.count() / 1000, " s; start jobs on several hosts with dtrun -H HOST:N,..."));
  }
  start.token = std::move(c.token);
  std::thread([channel = ControlChannel(std::move(reader), std::move(input->write))]() mutable {
    RunGuarded(
        "the control channel's reader", [&] { channel.Run(); },
        [](const absl::Status& s) { spdlog::error("{}", std::string(s.message())); });
  }).detach();
  return start;
}

}  // namespace dtrun
