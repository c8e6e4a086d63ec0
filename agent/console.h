// One console stream (dtrun's stdout or stderr) shared by every worker relay that writes to it. It
// remembers which relay left a line open (a prompt or a progress bar shown before its newline), so
// another rank's output first ends that line: two ranks never share a console line, and the
// owner's continuation is written without a second prefix. The bytes go to a ConsoleWriter, whose
// thread does the blocking writes. Not thread-safe: the agent's event loop drives every relay.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "base/console_writer.h"

namespace dtrun {

class Console {
 public:
  // How a segment of a worker's output ended.
  enum class End { kNewline, kCarriageReturn, kOpen };

  explicit Console(std::shared_ptr<ConsoleWriter> writer) : writer_(std::move(writer)) {}
  ~Console() { Flush(); }

  // Adds one segment of `writer`'s output. `prefix` is written when the segment starts a line on
  // the console (after a newline, a carriage return, or another writer's line). Segments are
  // collected until Flush(), which writes them with one write(2): whole lines, few system calls.
  void Write(const void* writer, absl::string_view prefix, absl::string_view text, End end);
  void Flush();
  // Writes whole lines of dtrun's own (the failure summary) on a line of their own.
  void WriteBlock(absl::string_view text);
  // Too much is waiting for the console: stop reading the workers that write to it.
  bool congested() const { return writer_->congested(); }
  // Ends `writer`'s open line, if it has one (its stream closed).
  void EndLineOf(const void* writer);
  // The terminal ended the line itself (the user's typed input was echoed with its newline).
  void ForgetOpenLine() { owner_ = nullptr; }

 private:
  // Whether a line is open on the console, after any log line that ended it was noted.
  bool LineOpen();
  // Before the first bytes of buffer_ that continue or end the open line: a log line may still
  // end that line before Flush hands them over (ConsoleWriter::LineJoin).
  void NoteJoin(bool ends_line, absl::string_view prefix);

  std::shared_ptr<ConsoleWriter> writer_;
  std::string buffer_;
  std::optional<ConsoleWriter::LineJoin> join_;  // how buffer_ begins, when it meets an open line
  const void* owner_ = nullptr;  // the writer whose line is open on the console
  bool at_line_start_ = false;   // the owner's last segment ended in '\r'
  uint64_t log_breaks_ = 0;      // writer_->lines_ended_by_logs() when owner_'s line was left open
};

// The consoles for dtrun's stdout and stderr. When both are the same file (a terminal, `2>&1`)
// they share one Console, so an open line on one is ended before the other writes.
struct Consoles {
  std::shared_ptr<Console> out;
  std::shared_ptr<Console> err;
  static Consoles ForStdio(const StdioWriters& writers);
  void ForgetOpenLines();
};

}  // namespace dtrun
