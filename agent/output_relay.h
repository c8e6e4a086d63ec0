// Relays one worker stream (stdout or stderr) to the console and/or a log file. The file gets the
// raw bytes. The console gets the stream cut at '\n' and '\r', each piece with the rank prefix
// when it starts a console line; a trailing piece without either (a prompt, a progress bar's
// latest state) is shown once the stream has been quiet for kQuietTime, so prompts and `\r` bars
// appear as they happen while ordinary lines, written in several pieces, still arrive whole.
// Not thread-safe: the agent's event loop drives every relay.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "agent/console.h"
#include "agent/line_filter_log.h"
#include "base/unique_fd.h"

namespace dtrun {

class OutputRelay {
 public:
  using Clock = std::chrono::steady_clock;
  // How long a partial line waits for more bytes before it is shown.
  static constexpr std::chrono::milliseconds kQuietTime{100};

  // A null `console` disables the console; an invalid `file` disables the file.
  OutputRelay(std::string prefix, std::shared_ptr<Console> console, UniqueFd file);

  // Consumes bytes as they arrive from the worker.
  void Write(absl::string_view data, Clock::time_point now = Clock::now());
  // Reads what `fd` has ready (non-blocking), at most kMaxReadPerCall bytes so that one chatty
  // worker cannot hold the event loop. Returns false at EOF or on error.
  bool DrainFrom(int fd, Clock::time_point now = Clock::now());
  // The console this stream goes to has too much waiting: do not read more now.
  bool congested() const { return console_ && console_->congested(); }
  // When a held partial line is due to be shown (nullopt: nothing held, or the console is
  // congested: then the worker is not quiet, dtrun is not reading it, and the rest of its line may
  // be waiting in the pipe).
  std::optional<Clock::time_point> quiet_deadline() const;
  // dtrun reads the worker again after a congestion: a held partial line's quiet time starts now.
  void ReadingResumed(Clock::time_point now);
  // Shows a held partial line whose quiet time has passed.
  void ShowIfQuiet(Clock::time_point now);
  // The stream ended: shows the held partial line and ends the console line.
  void Flush();
  // True once after a partial line that started a line (not a '\r' redraw) was shown because the
  // worker went quiet: the worker is probably waiting for input (pdb, input()).
  bool TakePrompted() { return std::exchange(prompted_, false); }
  // Also copies the lines that match `log`'s filters into its file (--duplicate-*-filters).
  void DuplicateMatching(std::unique_ptr<LineFilterLog> log) { filtered_ = std::move(log); }
  // Keeps the stream's last `bytes` (0: none) for the failure summary (agent/stderr_error.h).
  void KeepTail(size_t bytes) { tail_limit_ = bytes; }
  // The kept tail: at most the last `bytes` written, and whether earlier ones were dropped.
  absl::string_view tail() const;
  bool tail_cut() const { return tail_written_ > tail_limit_; }

 private:
  void Emit(absl::string_view text, Console::End end);
  void KeepInTail(absl::string_view data);

  static constexpr size_t kMaxLine = 64 * 1024;  // longer partial lines are shown, never held
  static constexpr size_t kMaxReadPerCall = 256 * 1024;
  std::string prefix_;
  std::shared_ptr<Console> console_;
  UniqueFd file_;
  std::string partial_;
  bool partial_starts_line_ = true;  // the held bytes follow a '\n' (or the stream's start)
  bool line_shown_ = false;          // part of the current line is already on the console
  bool prompted_ = false;
  Clock::time_point last_data_;
  std::unique_ptr<LineFilterLog> filtered_;
  std::string tail_;  // up to twice tail_limit_: trimmed to it when it passes that
  size_t tail_limit_ = 0;
  size_t tail_written_ = 0;  // bytes the tail has seen
};

// Expands torchrun's log-line prefix template: ${role_name}, ${rank}, ${local_rank}.
std::string ExpandPrefixTemplate(absl::string_view tmpl, absl::string_view role_name, int rank,
                                 int local_rank);

}  // namespace dtrun
