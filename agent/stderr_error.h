// A failed worker's error as its stderr shows it, for a worker that wrote no error file (a script
// without torchelastic's @record, which torchrun answers with "To enable traceback see: ..."):
// the Python traceback of an uncaught exception, with the exceptions chained to it (as Python or
// rich prints it), or the report of a fatal signal (Python's faulthandler, which dtrun turns on
// with PYTHONFAULTHANDLER, or the C++ worker library's, worker/crash_report.h) or the uncaught
// C++ exception that aborted it (NCCL's watchdog timeout in PyTorch), else, for a worker that
// exited with a code, the last lines it wrote (a shell script's error line).
// The text is the worker's, so it is read as hostile: bounded, never trusted to be well formed.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrun {

struct StderrError {
  // The exception's line ("ValueError: bad batch"), the C++ exception's what(), or "Fatal Python
  // error: ..."; empty for the last lines, which need not say the error.
  std::string message;
  std::string traceback;  // the block as printed, at most kMaxStderrErrorBytes (its end kept)
};

inline constexpr size_t kStderrTailBytes = 32 << 10;      // what the agent keeps of each worker's stderr
inline constexpr size_t kMaxStderrErrorBytes = 16 << 10;  // what a summary shows of it
// An uncaught exception's traceback is the last thing a script prints but for what runs at exit
// (c10d's warnings about process groups not destroyed, logging's flush); a traceback followed by
// more lines than this was printed earlier, by a script that went on (its last lines are shown).
inline constexpr int kMaxLinesAfterTheError = 40;

// `tail`: the last bytes of the worker's stderr; `cut`: bytes before them were dropped (its first
// line is then partial and is ignored). `by_signal`: the worker died of a signal, so only a
// faulthandler report can be its error (a traceback before it was a caught exception's). nullopt:
// nothing to show (an empty stderr, or a signal without a report).
std::optional<StderrError> FindErrorInStderr(absl::string_view tail, bool cut, bool by_signal);

}  // namespace dtrun
