// The remote half of `dtrun -H` (launcher/ssh_launch_plan.h): a dtrun that the launching dtrun
// started over ssh reads its stdin as that dtrun's control channel, not as its workers' input.
// Lines, each at most kMaxControlLine bytes:
//   "stdin terminal"  optional, before the token: the launching dtrun reads a terminal, which
//                  echoes what the user types (so a prompt's console line ends with the input);
//   "token T"      first, the rendezvous token, so it never shows on a command line;
//   "signal NAME"  the launching dtrun got NAME (SIGINT, SIGTERM, SIGHUP, SIGQUIT): act as if it
//                  was sent here (a second one escalates, as a second Ctrl-C does);
//   "input BYTES"  input for this host's workers (C-escaped, at most kMaxInputChunk bytes a line):
//                  the workers' stdin is a pipe that this dtrun routes as it routes a terminal
//                  (agent/stdin_router.h: a prompting rank gets the next line);
//   "input-end"    the launching dtrun's stdin ended: so does the workers';
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
// Raw bytes in one "input" line: escaped, each byte takes at most 4 characters.
inline constexpr size_t kMaxInputChunk = 1000;
// Input the workers have not read yet, held on their host; more is dropped with a warning (the
// launching dtrun waits for its ssh to take each line, so only workers that never read their stdin
// while megabytes are piped to the job lose any).
inline constexpr size_t kMaxHeldInput = 4 << 20;

struct ControlLine {
  enum class Kind { kToken, kSignal, kInput, kInputEnd, kStdinTerminal, kUnknown };
  Kind kind = Kind::kUnknown;
  std::string token;
  std::string input;  // kInput: the bytes, unescaped
  int signal = 0;
};
// One line without its newline. A signal other than those above is kUnknown.
ControlLine ParseControlLine(absl::string_view line);
// The "input" line (with its newline) that carries `bytes` (at most kMaxInputChunk of them).
std::string InputLine(absl::string_view bytes);

struct ControlStart {
  std::string token;
  bool input_echoed = false;  // "stdin terminal" came first
};
// Reads the lines up to the token from stdin (within `timeout`), gives the workers a pipe as stdin
// in its place, and starts the thread that acts on the later lines and feeds that pipe. Errors
// name the channel.
absl::StatusOr<ControlStart> TakeControlStdin(std::chrono::milliseconds timeout);

}  // namespace dtrun
