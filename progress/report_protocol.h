// The progress-report protocol between workers and their node's agent (docs/DESIGN.md,
// "Progress reports"). A report is one datagram on the agent's Unix socket: at most
// kMaxReportBytes of printable ASCII, a kind and then key=value fields, separated by spaces:
//
//   hello lang=python stack_signal=40     a worker announces itself (and how to get its stacks)
//   hello lang=cpp warm=1                 ... and that dtrun may start its successors parked
//   beat step=120 samples=15360           a heartbeat: the step reached, samples so far
//   begin name=checkpoint                 a named section starts (step, eval, checkpoint, ...)
//   end name=checkpoint                   ... and ends
//   total steps=90000                     how many steps the job will run (for rates and ETA)
//   snapshot step=120 bytes=94371840 us=31000   an in-memory snapshot of step 120 is complete
//   restored source=memory step=120       what this attempt resumed from (memory, buddy, peer, disk or none)
//   keeping step=120 bytes=94371840       on its way out after a failure, the worker is writing its
//                                         state of step 120 into memory: dtrun waits for it (up to
//                                         --shutdown-timeout) before SIGKILL
//   kept step=120                         on its way out after a failure, the worker kept its state of
//                                         step 120 in memory (a snapshot on failure): nothing is left to save
//   not_kept step=120                     ... or could not (its stderr says why): nothing is left to save either
//   diverged step=120 fingerprint=00ab12cd34ef5678 majority=91fe...|none   this rank's parameters differ
//                                         from the other replicas' at step 120 (replica checks)
//   sync step=120 wait_us=4100 step_us=250000   its wait inside step 120's gradient all-reduce, and
//                                         the step's duration (the straggler watch)
//
// Unknown keys are ignored (newer clients talk to older agents); everything else that does not
// fit is an error. The sender is identified by the kernel (SO_PASSCRED), never by the text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun::progress {

inline constexpr size_t kMaxReportBytes = 512;
inline constexpr size_t kMaxNameBytes = 64;

struct Report {
  enum class Kind {
    kHello,
    kBeat,
    kBegin,
    kEnd,
    kTotal,
    kSnapshot,
    kRestored,
    kSync,
    kDiverged,
    kKeeping,
    kKept,
    kNotKept
  };
  Kind kind = Kind::kBeat;
  std::optional<int64_t> step;     // beat, snapshot, kept, ...
  std::optional<int64_t> samples;  // beat
  std::optional<int64_t> total_steps;
  std::optional<int64_t> bytes;    // snapshot, keeping
  std::optional<int64_t> micros;   // snapshot: what writing it cost
  std::optional<int64_t> wait_micros;  // sync: the wait inside the step's gradient all-reduce
  std::optional<int64_t> step_micros;  // sync: the step's duration
  std::string fingerprint;  // diverged: 16 hex digits
  std::string majority;     // diverged: 16 hex digits, or "none" (no majority)
  std::string source;              // restored: memory | buddy (a copy fetched from the buddy node) | disk | none
  std::string name;       // begin/end: [A-Za-z0-9_.:-]{1,64}
  std::string lang;       // hello: [a-z0-9]{1,16}
  bool warm = false;      // hello: the program may be started parked (worker/warm_start.h)
  int stack_signal = 0;   // hello: SIGUSR1, SIGUSR2 or a real-time signal that makes the worker write its stacks
};

// A section name: 1-64 of [A-Za-z0-9_.:-].
bool IsValidSectionName(absl::string_view name);

// Parses one datagram (a trailing newline is allowed). InvalidArgument says what is wrong.
absl::StatusOr<Report> ParseReport(absl::string_view datagram);

// The datagram for `report` (what the C++ worker library sends); ParseReport reads it back.
std::string FormatReport(const Report& report);

}  // namespace dtrun::progress
