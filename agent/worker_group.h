// One attempt's workers: spawns nproc_per_node processes with their environment and output
// relays, tracks their exits, and stops them (signal to each process group, grace, SIGKILL).
// The agent's event loop feeds it reaped exits and readable pipes. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent_options.h"
#include "agent/child_process.h"
#include "agent/console.h"
#include "agent/failure_report.h"
#include "agent/oom_kills.h"
#include "agent/output_relay.h"
#include "agent/warm_pool.h"
#include "rendezvous/rendezvous_state.h"

namespace dtrun {

// Where an attempt's files go: <root>/attempt_<N>/<local_rank>/{stdout,stderr}.log, error.json.
struct AttemptPaths {
  std::string log_root;    // persistent logs (empty: none)
  std::string error_root;  // error files (always set)
};

class WorkerGroup {
 public:
  struct Worker {
    int local_rank = 0;
    int global_rank = 0;
    ChildProcess process;
    std::unique_ptr<OutputRelay> out;
    std::unique_ptr<OutputRelay> err;
    std::string dir;  // the attempt's files for this worker: error.json, stacks.txt
    bool warm = false;  // released from the warm pool rather than spawned
  };

  // Where the round's workers write and read. `pipe_stdin`: each worker reads a pipe (its write
  // end is the process's stdin_fd()); otherwise workers inherit dtrun's stdin.
  struct Io {
    Consoles consoles;
    bool pipe_stdin = false;
    std::vector<int> snapshot_fds;  // by local rank (empty: no in-memory snapshots)
    std::vector<int> replica_fds;   // by local rank (empty: no buddy copies)
    WarmPool* warm = nullptr;       // parked workers to release before spawning (null: none)
    const OomKillCounter* oom = nullptr;  // names the out-of-memory killer in failures (null: not)
  };
  // What each worker of the round `layout` describes would be spawned as, by local rank (no
  // directory is made): a spare parks workers from these before it has a round of its own.
  static std::vector<SpawnRequest> SpawnRequests(const AgentOptions& options,
                                                 const std::map<std::string, std::string>& base_env,
                                                 const AttemptPaths& paths, const rdzv::Assignment& layout,
                                                 const Io& io);
  // Spawns every worker of the round. On error, workers already started are killed.
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(
      const AgentOptions& options, const std::map<std::string, std::string>& base_env,
      const AttemptPaths& paths, const rdzv::Assignment& layout, const Io& io);

  // Records a reaped exit. Returns false if `pid` is not one of this group's workers.
  bool OnExit(pid_t pid, int wait_status);
  bool all_exited() const;
  bool all_succeeded() const;
  // Failures in the order they were observed.
  const std::vector<WorkerFailure>& failures() const { return failures_; }

  // The local rank of the running worker that is `pid` or leads `pid`'s process group; -1: none.
  int LocalRankOf(pid_t pid) const;
  // Sends `signo` to every running worker's process group.
  void SignalAll(int signo);
  // Reads whatever the pipes hold and closes them; called once all workers have exited.
  void DrainAndCloseOutputs();

  // What each worker was spawned as, by local rank: the warm pool starts their successors from it.
  const std::vector<SpawnRequest>& requests() const { return requests_; }

  std::vector<Worker>& workers() { return workers_; }
  const std::vector<Worker>& workers() const { return workers_; }

 private:
  WorkerGroup() = default;
  std::vector<Worker> workers_;
  std::vector<SpawnRequest> requests_;
  std::vector<WorkerFailure> failures_;
  std::map<int, std::string> error_files_;  // local rank → path
  bool StoppedByUs(int wait_status) const;
  // A worker without an error file: its error as its stderr's tail shows it (agent/stderr_error.h).
  static void ReadErrorFromStderr(Worker& w, WorkerFailure& f);
  // Says in `f` when the kernel's out-of-memory killer killed it, or killed another process of
  // the job (a DataLoader worker) during this attempt.
  void NameOomKills(WorkerFailure& f) const;
  std::set<int> signals_sent_;  // stop signals sent to the group
  const OomKillCounter* oom_ = nullptr;
  OomCounts oom_at_start_;
};

}  // namespace dtrun
