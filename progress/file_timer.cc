#include "progress/file_timer.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dtrun::progress {

absl::StatusOr<TimerRequest> ParseTimerRequest(absl::string_view line) {
  if (line.size() > kMaxTimerLineBytes) return absl::InvalidArgumentError("longer than PIPE_BUF");
  nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  auto pid = j.find("pid");
  auto scope = j.find("scope_id");
  auto expiration = j.find("expiration_time");
  if (pid == j.end() || !pid->is_number_integer() || scope == j.end() || !scope->is_string() ||
      expiration == j.end() || !expiration->is_number()) {
    return absl::InvalidArgumentError("needs pid (integer), scope_id (string) and expiration_time (number)");
  }
  TimerRequest r;
  r.pid = pid->get<int64_t>();
  r.scope_id = scope->get<std::string>();
  r.expiration_time = expiration->get<double>();
  if (r.pid <= 0 || r.pid > 0x3fffffff) return absl::InvalidArgumentError("pid out of range");
  if (!std::isfinite(r.expiration_time)) return absl::InvalidArgumentError("expiration_time is not finite");
  if (auto sig = j.find("signal"); sig != j.end()) {
    if (!sig->is_number_integer()) return absl::InvalidArgumentError("signal is not an integer");
    int64_t s = sig->get<int64_t>();
    if (s > 64) return absl::InvalidArgumentError("signal out of range");
    r.signal = static_cast<int>(std::max<int64_t>(s, 0));
  }
  return r;
}

bool FileTimers::Apply(const TimerRequest& r) {
  auto key = std::make_pair(r.pid, r.scope_id);
  if (r.expiration_time < 0) {
    timers_.erase(key);
    return true;
  }
  if (timers_.size() >= kMaxTimers && !timers_.count(key)) return false;
  timers_[key] = r;
  return true;
}

std::vector<TimerRequest> FileTimers::TakeExpired(double now_unix) {
  std::vector<TimerRequest> expired;
  for (auto it = timers_.begin(); it != timers_.end();) {
    if (it->second.expiration_time <= now_unix) {
      expired.push_back(it->second);
      it = timers_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

std::optional<double> FileTimers::NextExpiry() const {
  std::optional<double> next;
  for (const auto& [key, t] : timers_) {
    if (!next || t.expiration_time < *next) next = t.expiration_time;
  }
  return next;
}

absl::StatusOr<TimerPipe> TimerPipe::Create(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode) || st.st_uid != ::getuid()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "TORCHELASTIC_TIMER_FILE ", path, " exists and is not a named pipe of yours; remove it or choose another path"));
    }
    ::unlink(path.c_str());
  }
  if (::mkfifo(path.c_str(), 0600) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the timer pipe TORCHELASTIC_TIMER_FILE ", path, ": ", strerror(errno)));
  }
  // O_RDWR: clients opening with O_NONBLOCK always find a reader, and we never read end-of-file.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) {
    int err = errno;
    ::unlink(path.c_str());
    return absl::FailedPreconditionError(absl::StrCat("cannot open the timer pipe ", path, ": ", strerror(err)));
  }
  return TimerPipe(std::move(fd), path);
}

TimerPipe::~TimerPipe() {
  if (fd_.valid()) ::unlink(path_.c_str());
}

std::vector<std::string> TimerPipe::ReadLines() {
  std::vector<std::string> lines;
  char buf[16384];
  for (int reads = 0; reads < 4; ++reads) {
    ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        if (!skipping_) lines.push_back(std::move(partial_));
        partial_.clear();
        skipping_ = false;
      } else if (!skipping_) {
        partial_.push_back(buf[i]);
        if (partial_.size() > kMaxTimerLineBytes) {
          partial_.clear();
          skipping_ = true;
        }
      }
    }
  }
  return lines;
}

}  // namespace dtrun::progress
