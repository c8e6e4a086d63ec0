// A worker's last words, where its launcher looks for them. torchelastic's error file
// ($TORCHELASTIC_ERROR_FILE, set by dtrun and by torchrun for each worker) holds one JSON record:
// the message, a call stack and the time. Both launchers put it in the failure summary, and pick
// the root cause among several failed ranks by the earliest time. Python scripts write it through
// `@record`; this is the C++ trainers' way.
//
// The record is torchelastic's: {"message": {"message": M, "extraInfo": {"py_callstack": S,
// "timestamp": "SECONDS"}}}, whole seconds since torchrun reads them with int(). dtrun orders the
// ranks that failed within one second by the file's modification time.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace dtrun::worker {

// The record's text. Bytes that are not UTF-8 are replaced, not refused.
std::string ErrorRecordJson(absl::string_view message, absl::string_view callstack, int64_t unix_ms);

// "PROGRAM: MESSAGE" on stderr and, where the environment names an error file, the record in it
// (`callstack` empty: the message); only the first call's record, the cause of what follows. Never throws: it runs in
// the handlers of last resort. A file that cannot be written is one more line on stderr, and the exit goes on.
void ReportFatalError(absl::string_view program, absl::string_view message, absl::string_view callstack = "");

}  // namespace dtrun::worker
