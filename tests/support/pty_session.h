// Test support: runs a command on a new pseudo-terminal, as a person at a terminal would: the
// command leads its own session with the terminal as its controlling terminal and is in the
// foreground (so job control applies to it and its children as it would under a shell). The test
// reads the screen's bytes and types. Every wait is bounded; no sleeps.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace dtrun::testing {

class PtySession {
 public:
  PtySession(std::vector<std::string> argv, std::map<std::string, std::string> env = {});
  ~PtySession();  // kills the command's process group if it still runs

  bool started() const { return pid_ > 0; }
  // Reads until `needle` has appeared after `from` (an offset into output()); false on timeout/EOF.
  bool WaitFor(const std::string& needle, std::chrono::milliseconds timeout = std::chrono::seconds(60),
               size_t from = 0);
  // Sends keystrokes (the terminal echoes them, as it would for a person).
  void Type(const std::string& text);
  // Waits for exit, reading the screen meanwhile; the exit code (128 + signal), nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  const std::string& output() const { return output_; }

 private:
  bool Pump(std::chrono::steady_clock::time_point deadline);
  pid_t pid_ = -1;
  UniqueFd master_;
  std::string output_;
  std::optional<int> exit_code_;
};

}  // namespace dtrun::testing
