// What is known about a failed worker, and torchrun's failure summary built from it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace dtrun {

struct WorkerFailure {
  std::string host;
  int global_rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  int exit_code = 0;    // valid when signal == 0
  int signal = 0;       // > 0 if killed by a signal
  std::chrono::system_clock::time_point time;
  std::string error_file;   // path given to the worker
  std::string message;      // from the error file, if the worker wrote one
  std::string traceback;    // from the error file
  double error_timestamp = 0;  // from the error file; orders root causes across workers
};

// The exit code dtrun reports for a failure: the worker's code, or 128 + signal.
int ExitCodeOf(const WorkerFailure& f);

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
