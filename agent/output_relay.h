// Relays one worker stream (stdout or stderr) to the console and/or a log file. Console output is
// written a whole line at a time with the rank prefix, so two ranks never share a line; the file
// gets the raw bytes. Not thread-safe: the agent's event loop drives every relay.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace dtrun {

class OutputRelay {
 public:
  // `console_fd` < 0 disables the console; an invalid `file` disables the file.
  OutputRelay(std::string prefix, int console_fd, UniqueFd file);

  // Consumes bytes as they arrive from the worker.
  void Write(absl::string_view data);
  // Reads everything `fd` has ready (non-blocking). Returns false at EOF or on error.
  bool DrainFrom(int fd);
  // Emits a trailing partial line (a newline is added on the console).
  void Flush();

 private:
  void EmitLine(absl::string_view line);

  static constexpr size_t kMaxLine = 64 * 1024;  // longer lines are split, never held forever
  std::string prefix_;
  int console_fd_;
  UniqueFd file_;
  std::string partial_;
};

// Expands torchrun's log-line prefix template: ${role_name}, ${rank}, ${local_rank}.
std::string ExpandPrefixTemplate(absl::string_view tmpl, absl::string_view role_name, int rank,
                                 int local_rank);

}  // namespace dtrun
