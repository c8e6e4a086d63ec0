// What is known about a failed worker, and torchrun's failure summary built from it.
#pragma once

#include <string>
#include <vector>

#include "rendezvous/rendezvous_state.h"

namespace dtrun {

// A failed worker as the rendezvous carries it between nodes (time in ms since the epoch).
using WorkerFailure = rdzv::FailureInfo;
using rdzv::ExitCodeOf;

// Root cause first (RootCauseIndex), the others in observed order: how failures are reported.
std::vector<WorkerFailure> RootCauseFirst(std::vector<WorkerFailure> failures);

// Reads TORCHELASTIC_ERROR_FILE JSON (torch.distributed.elastic's `record` format) into `f`.
// A missing or malformed file leaves `f` unchanged.
void ReadErrorFile(WorkerFailure& f);

// The root cause: the failure with the earliest error-file timestamp, else the first observed.
size_t RootCauseIndex(const std::vector<WorkerFailure>& failures);

// torchrun's summary ("<program> FAILED", Failures, Root Cause) for `failures` (non-empty; the
// root cause is chosen by RootCauseIndex).
std::string FormatFailureSummary(const std::string& program, const std::vector<WorkerFailure>& failures);

// This host's name, as failures report it.
std::string LocalHostName();

}  // namespace dtrun
