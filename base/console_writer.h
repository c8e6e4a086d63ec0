// Writes one of dtrun's console streams (stdout or stderr) from a thread of its own, so that a
// console nobody reads (`dtrun ... | less` resting on a page, a reader that never reads, a terminal
// stopped with Ctrl-S) blocks that thread and never the agent's event loop: Ctrl-C, a worker's
// failure and the rendezvous are still acted on at once.
//
// Bytes wait in memory. Past `high_water` the writer is congested: the agent stops reading the
// workers that write to this stream (their pipes fill and they block, as they would writing to the
// console themselves), and resumes them when the writer is back under half of it; wake_fd() tells
// the event loop. Log lines (any thread) are never blocked on: past four times `high_water` they
// are dropped, and the count is written once the console drains. A reader that is gone (EPIPE)
// makes every later byte vanish, as a failed write(2) did before.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrun {

class ConsoleWriter {
 public:
  static constexpr size_t kDefaultHighWater = 1 << 20;

  // Starts the thread that writes to `fd` (not owned; it must stay open while the writer lives).
  explicit ConsoleWriter(int fd, size_t high_water = kDefaultHighWater);
  // Drops what is still queued (WaitWritten delivers it first) and stops the thread; a thread
  // blocked in write(2) by a stuck reader is left to end with the process (it owns what it touches).
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // How worker output put together while the console's last line was open (a prompt) begins:
  // it continues that line, or ends it with its first byte, a '\n' (another rank's line follows).
  // A log line may end the open line after the bytes were put together and before Write takes
  // them: then a continuation begins a line and gets `prefix`, and the '\n' is dropped.
  struct LineJoin {
    uint64_t log_breaks = 0;  // lines_ended_by_logs() when the bytes were put together
    bool ends_line = false;
    std::string prefix;  // for a continuation
  };
  // Queues worker output and leaves `bytes` empty (its buffer may be swapped for a spare one).
  // The caller bounds how much it adds while congested(). `join`: how the bytes meet an open line.
  // Returns lines_ended_by_logs() as the bytes were queued: what a line they leave open is
  // compared with later.
  uint64_t Write(std::string& bytes, const LineJoin* join = nullptr);
  // Queues a log line unless far too much is waiting; false if it was dropped (and counted). A
  // line left open by Write (a prompt) is ended first, so the log line is whole.
  bool WriteLog(absl::string_view line);
  // How many open lines log lines have ended so far: a changed count tells the one who left the
  // line open (agent/console.h) that its next bytes begin a new line.
  uint64_t lines_ended_by_logs() const;
  bool congested() const;
  // Readable (an eventfd) after a congestion has cleared or the queue has emptied; ClearWake()
  // resets it. Spurious wakes are harmless.
  int wake_fd() const;
  void ClearWake();
  // Waits until everything queued has been written (or the reader is gone): true. Returns false
  // as soon as `interrupt_fd` (e.g. a signalfd; -1 for none) is readable, or when the reader has
  // taken nothing for `stall_limit` (kNoStallLimit: however long it takes).
  static constexpr std::chrono::milliseconds kNoStallLimit = std::chrono::hours(24);
  bool WaitWritten(int interrupt_fd, std::chrono::milliseconds stall_limit);
  // Bytes queued and not yet written.
  size_t unwritten() const;

  // For a terminal: one line kept below everything written (dtrun's progress line). It is drawn
  // only when the console is at the start of a line, so it never lands inside a worker's open
  // line (a prompt, a `\r` progress bar); it is erased before the next bytes and drawn again
  // after them, cut to the terminal's width. "" erases it for good.
  void SetStatusLine(std::string line);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// dtrun's stdout and stderr writers; one shared writer when both are the same file (a terminal,
// `2>&1`), so their bytes keep the order in which they were written.
struct StdioWriters {
  std::shared_ptr<ConsoleWriter> out;
  std::shared_ptr<ConsoleWriter> err;
  static StdioWriters Start();
};

}  // namespace dtrun
