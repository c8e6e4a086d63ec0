// The remote half of `dtrun -H` (launcher/ssh_launch_plan.h): a dtrun that the launching dtrun
// started over ssh reads its stdin as that dtrun's control channel, not as its workers' input.
// Lines, each at most kMaxControlLine bytes:
//   "token T"      first, the rendezvous token, so it never shows on a command line;
//   "signal NAME"  the launching dtrun got NAME (SIGINT, SIGTERM, SIGHUP, SIGQUIT): act as if it
//                  was sent here (a second one escalates, as a second Ctrl-C does);
//   end of input   the launching dtrun, or its ssh, is gone: stop as on SIGTERM, so a job whose
//                  launcher was killed leaves no process on any host.
// ssh gives no other way: without a terminal it forwards no signal, and sshd does not signal the
// command when the connection closes, but it does end the command's stdin.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

// dtrun's first argument when the launching dtrun starts it; not a user flag.
inline constexpr char kControlStdinFlag[] = "--control-stdin";
inline constexpr size_t kMaxControlLine = 4096;

struct ControlLine {
  enum class Kind { kToken, kSignal, kUnknown };
  Kind kind = Kind::kUnknown;
  std::string token;
  int signal = 0;
};
// One line without its newline. A signal other than those above is kUnknown.
ControlLine ParseControlLine(absl::string_view line);

// Reads the token line from stdin (within `timeout`), gives the workers /dev/null as stdin in its
// place, and starts the thread that acts on the later lines. Errors name the channel.
absl::StatusOr<std::string> TakeControlStdin(std::chrono::milliseconds timeout);

}  // namespace dtrun
