// The per-user registry of running launches: one JSON file per dtrun process under the runtime
// directory, so `dtrun status` and `dtrun kill` can find launches and their agents.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace dtrun {

struct LaunchRecord {
  std::string launch_id;
  std::string run_id;
  pid_t pid = 0;
  unsigned long long start_ticks = 0;
  int nproc_per_node = 0;
  std::string command;
  long long started_unix = 0;
};

// $DTRUN_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dtrun, else /tmp/dtrun-<uid>; created 0700.
std::string RuntimeDir();

// Writes the record; returns its path.
absl::StatusOr<std::string> RegisterLaunch(const LaunchRecord& record);
// Every readable record whose process is still alive (stale ones are removed).
std::vector<LaunchRecord> ListLaunches();

}  // namespace dtrun
