// What is known about a failed worker, and torchrun's failure summary built from it.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "rendezvous/rendezvous_state.h"

namespace dtrun {

// A failed worker as the rendezvous carries it between nodes (time in ms since the epoch).
using WorkerFailure = rdzv::FailureInfo;
using rdzv::ExitCodeOf;

// Root cause first (RootCauseIndex), the others in observed order: how failures are reported.
std::vector<WorkerFailure> RootCauseFirst(std::vector<WorkerFailure> failures);

// Reads TORCHELASTIC_ERROR_FILE JSON (torch.distributed.elastic's `record` format) into `f`.
// The file is the worker's: it is opened without following links or blocking (a FIFO, a
// directory or a link is not read), read up to kMaxErrorFileBytes, and every field is type-checked.
// A missing, malformed or ill-typed file leaves `f` unchanged; a too-large one says so.
void ReadErrorFile(WorkerFailure& f);
// The parsing half of ReadErrorFile: `json` is untrusted. Message and traceback are cut to
// kMaxErrorTextBytes each (the summary says where the whole text is).
void ParseErrorRecord(absl::string_view json, WorkerFailure& f);
inline constexpr size_t kMaxErrorFileBytes = 1 << 20;
inline constexpr size_t kMaxErrorTextBytes = 16 << 10;

// The root cause: the earliest failure, each at its error record's time, else at the time the agent
// saw the worker end; the first observed among equals. A rank killed without a word (SIGKILL, the
// OOM killer) thus stays ahead of the peers whose collectives then failed and wrote records.
size_t RootCauseIndex(const std::vector<WorkerFailure>& failures);

// The failed job's root cause as torchelastic's error file (`record` format: message, extraInfo
// with py_callstack and timestamp, errorCode), which torchrun's own @record writes to the
// launcher's TORCHELASTIC_ERROR_FILE and TorchX reads. `failures` non-empty.
std::string LauncherErrorRecord(const std::vector<WorkerFailure>& failures);

// torchrun's summary ("<program> FAILED", Failures, Root Cause) for `failures` (non-empty; the
// root cause is chosen by RootCauseIndex).
std::string FormatFailureSummary(const std::string& program, const std::vector<WorkerFailure>& failures);


}  // namespace dtrun
