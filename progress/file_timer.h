// torchelastic's FileTimer protocol, served by the agent: scripts that arm timers under torchrun
// (FileTimerClient writing to the named pipe in TORCHELASTIC_TIMER_FILE) work unchanged. Each
// request is one JSON line (at most PIPE_BUF bytes, so writes from many workers never interleave):
//   {"version": 1, "pid": 1234, "scope_id": "step", "expiration_time": 1.7e9, "signal": 9}
// A negative expiration_time releases the timer. The pid in a request is the client's claim: the
// agent acts on it only for its own workers and their process groups.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace dtrun::progress {

struct TimerRequest {
  int64_t pid = 0;
  std::string scope_id;
  double expiration_time = -1;  // Unix seconds; negative: release
  int signal = 0;               // sent when the timer expires (0 or less: none)
};

inline constexpr size_t kMaxTimerLineBytes = 4096;  // PIPE_BUF
inline constexpr size_t kMaxTimers = 4096;

// One line of the pipe (untrusted). InvalidArgument says what is wrong.
absl::StatusOr<TimerRequest> ParseTimerRequest(absl::string_view line);

// The armed timers, keyed by (pid, scope); bounded by kMaxTimers (more are refused).
class FileTimers {
 public:
  // Returns false if the table is full and the request would add a timer.
  bool Apply(const TimerRequest& request);
  // Removes and returns the timers that expired at `now_unix` (seconds).
  std::vector<TimerRequest> TakeExpired(double now_unix);
  std::optional<double> NextExpiry() const;
  void Clear() { timers_.clear(); }
  size_t size() const { return timers_.size(); }

 private:
  std::map<std::pair<int64_t, std::string>, TimerRequest> timers_;
};

// The named pipe: created 0600 (an old FIFO at the path is replaced; anything else there is an
// error, never removed), held open for reading and writing so that clients can always open it
// and the agent never sees end-of-file.
class TimerPipe {
 public:
  static absl::StatusOr<TimerPipe> Create(const std::string& path);
  TimerPipe(TimerPipe&&) = default;
  TimerPipe& operator=(TimerPipe&&) = default;
  ~TimerPipe();
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  // Reads what is waiting (at most 64 KiB per call) and returns the complete lines. A line longer
  // than kMaxTimerLineBytes is dropped.
  std::vector<std::string> ReadLines();

 private:
  TimerPipe(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
  std::string partial_;
  bool skipping_ = false;  // inside an overlong line
};

}  // namespace dtrun::progress
