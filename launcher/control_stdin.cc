#include "launcher/control_stdin.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/guarded_thread.h"
#include "base/signal_names.h"
#include "base/unique_fd.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

// Lines from the control fd; bytes past a line wait for the next call.
class ControlReader {
 public:
  explicit ControlReader(UniqueFd fd) : fd_(std::move(fd)) {}

  // The next line; nullopt at end of input, on an error, or after `timeout_ms` (-1: none).
  std::optional<std::string> Next(int timeout_ms) {
    for (;;) {
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
      pollfd p{fd_.get(), POLLIN, 0};
      int ready = ::poll(&p, 1, timeout_ms);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return std::nullopt;
      char chunk[kMaxControlLine];
      ssize_t n = ::read(fd_.get(), chunk, sizeof(chunk));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  UniqueFd fd_;
  std::string buffer_;
};

void Watch(ControlReader reader) {
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, nullptr);  // kill() below goes to the agent's signalfd
  while (std::optional<std::string> line = reader.Next(-1)) {
    ControlLine c = ParseControlLine(*line);
    if (c.kind == ControlLine::Kind::kSignal) {
      ::kill(::getpid(), c.signal);
    } else {
      spdlog::warn("the launching dtrun's control channel (stdin) sent a line dtrun does not know; ignored");
    }
  }
  spdlog::warn("the connection to the launching dtrun (its ssh) closed; stopping this host's workers");
  ::kill(::getpid(), SIGTERM);
}

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
  }
  return c;
}

absl::StatusOr<std::string> TakeControlStdin(std::chrono::milliseconds timeout) {
  UniqueFd control(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3));
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!control.valid() || !null.valid() || ::dup2(null.get(), STDIN_FILENO) < 0) {
    return absl::InternalError("cannot take stdin as the launching dtrun's control channel (dup2 failed)");
  }
  ControlReader reader(std::move(control));
  std::optional<std::string> first = reader.Next(static_cast<int>(timeout.count()));
  ControlLine c = first ? ParseControlLine(*first) : ControlLine{};
  if (c.kind != ControlLine::Kind::kToken) {
    return absl::InvalidArgumentError(absl::StrCat(
        kControlStdinFlag, " is for a dtrun started by dtrun -H: its stdin did not begin with the token within ",
        timeout.count() / 1000, " s; start jobs on several hosts with dtrun -H HOST:N,..."));
  }
  std::thread([r = std::move(reader)]() mutable {
    RunGuarded(
        "the control channel's reader", [&] { Watch(std::move(r)); },
        [](const absl::Status& s) { spdlog::error("{}", std::string(s.message())); });
  }).detach();
  return c.token;
}

}  // namespace dtrun
