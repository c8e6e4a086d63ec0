// The per-user registry of running launches: one JSON file per dtrun process under the runtime
// directory, so `dtrun status` and `dtrun kill` can find launches and their agents.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/runtime_dir.h"

namespace dtrun {

struct LaunchRecord {
  std::string launch_id;
  std::string run_id;
  pid_t pid = 0;
  unsigned long long start_ticks = 0;
  int nproc_per_node = 0;
  std::string command;
  long long started_unix = 0;
  // A `dtrun -H` launcher: the job's rendezvous HOST:PORT. No agent runs in that process; the
  // job's token, if dtrun made it, is in its private directory (launch_layout::TokenFile).
  std::string endpoint;
  // A multi-node agent: the rendezvous HOST:PORT it joins and its static --node-rank (-1: elastic),
  // so that an agent of the same node started again can tell whether this one lives ("": none).
  int node_rank = -1;
  std::string service;
};

// The record of this process (its pid, start ticks and now) under those ids and command line.
LaunchRecord RecordOfThisProcess(std::string launch_id, std::string run_id, std::string command);
// Writes the record; returns its path.
absl::StatusOr<std::string> RegisterLaunch(const LaunchRecord& record);
// Every record whose process is still alive (stale ones are removed). Records are read as
// untrusted: regular files only, no links, at most 64 KiB, fields type-checked.
std::vector<LaunchRecord> ListLaunches();
// Whether a live launch other than this process runs node `node_rank` (-1: an elastic node, any)
// of `run_id` at the rendezvous `service` on this machine (this user's registry).
bool AnotherLaunchRunsNode(const std::string& run_id, const std::string& service, int node_rank);
// Removes what launches that are gone left (a crashed or killed dtrun cannot remove its own): the
// private `<pid>-<hex>` directories and the records. Gone: its process has exited, or the pid now
// belongs to a process that is not the one its record names. Returns how many were removed.
int RemoveLeftoversOfGoneLaunches();

}  // namespace dtrun
