// What the agent runs and how: filled in by the launcher from the command line, validated there.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/launch_layout.h"
#include "progress/progress_board.h"

namespace dtrun {

// Which of a worker's streams go to a log file only (redirect) or to the file and the console (tee).
// Bit 1 = stdout, bit 2 = stderr, as torchrun's --redirects/--tee values 0..3.
using StreamMask = int;
inline constexpr StreamMask kStdoutBit = 1;
inline constexpr StreamMask kStderrBit = 2;

struct AgentOptions {
  // The command each worker runs: program path and its full argv (argv[0] included).
  std::string executable;
  std::vector<std::string> argv;
  std::string program_name;  // as the user typed it, for messages and the failure summary
  // Python programs: the interpreter and where it was chosen from, named in the failure summary
  // (a worker that cannot import torch most often ran another Python than the user meant).
  std::string interpreter_note;
  bool virtual_local_rank = false;  // --virtual-local-rank
  // Started by `dtrun -H` whose terminal echoes the input it passes on (launcher/control_stdin.h).
  bool input_echoed_elsewhere = false;
  // dtrun's own TORCHELASTIC_ERROR_FILE (set by TorchX and other callers): a failed job's root
  // cause is written there in torchelastic's format, as torchrun's @record does ("": none).
  std::string launcher_error_file;
  // Legacy torch.distributed.launch: "--local-rank" → "--local-rank=3" per worker, inserted at
  // argv[script_args_at], between the script and its own arguments, where that launcher put it
  // (scripts that end in an argparse.REMAINDER list of overrides depend on it).
  std::optional<std::string> local_rank_arg;
  size_t script_args_at = 0;

  int nproc_per_node = 1;
  // --numa-binding: the CPUs of each local rank (empty: workers inherit dtrun's affinity).
  std::vector<std::vector<int>> worker_cpus;
  int node_rank = 0;
  int rank_hint = -1;  // --node-rank when given: with an elastic rendezvous, the order of its first round
  std::string role = "default";
  int max_restarts = 0;
  std::string run_id = "none";
  std::string launch_id;  // unique per dtrun process; marks every worker (see env::kLaunchId)
  pid_t guard_pid = -1;   // the launch guard, our only child that is not a worker

  std::string master_addr = "127.0.0.1";  // what workers are told
  int master_port = 29500;                // 0: the agent's store picks a free port
  std::string store_bind_addr;            // where the agent's store listens (default: master_addr)

  std::string log_dir;                      // empty: no persistent logs
  // --duplicate-stdout-filters / --duplicate-stderr-filters: lines of any worker that contain one
  // of these go to OUTPUT/attempt_N/filtered_stdout.log (filtered_stderr.log) too.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string event_log;                    // --event-log FILE (also OUTPUT/events.jsonl with a log dir)
  std::map<int, StreamMask> redirects;      // local rank → mask; missing = 0
  std::map<int, StreamMask> tee;            // local rank → mask; missing = 0
  std::optional<std::set<int>> console_ranks;  // --local-ranks-filter
  std::string log_line_prefix_template = "[${role_name}${local_rank}]:";

  std::vector<int> signals_to_handle;
  std::chrono::milliseconds shutdown_timeout{30000};
  bool set_omp_num_threads = false;  // OMP_NUM_THREADS=1 when the user has not set it
  std::string local_addr;            // this node's address (--local-addr)
  // The interface holding local_addr: exported as GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME unless
  // the user set them, so collectives do not bind to loopback when the hostname resolves there.
  std::string socket_ifname;
  // Progress reports and hangs (docs/DESIGN.md, "Progress reports", "Hang detection").
  // Each local rank reports on a socket of its own, <progress_dir>/progress.<local rank>.sock, so
  // that one flooding worker cannot crowd out the others' reports (empty: no reports).
  std::string progress_dir;
  std::string python_dir;        // holds the `dtrun` Python module: appended to workers' PYTHONPATH
  std::string xxhash_library;    // the file of dtrun's libxxhash, for that module's snapshots
  std::string timer_file;        // torchelastic's FileTimer pipe (empty: not enabled)
  progress::HangPolicy hang;
  // A worker's process in uninterruptible sleep (D state) this long is a hang (0: not checked).
  std::chrono::milliseconds dstate_timeout{0};
  // This many attempts in a row without progress past the best step of the attempts before them
  // end the job instead of restarting it (0: never; only for jobs whose workers report steps).
  int max_attempts_without_progress = 3;
  // In-memory snapshots (docs/DESIGN.md, "Snapshots"): the region each worker may fill (0: off),
  // and --snapshot-every (0: the worker library's adaptive cadence).
  uint64_t snapshot_bytes_per_worker = 0;
  int snapshot_every = 0;
  // Multi-node: copy snapshots crossing a multiple of this many steps to the buddy node (0: off).
  int snapshot_buddy_every = 10;
  // What this node shares with others that one fault takes down (--failure-domain; "": none).
  std::string failure_domain;
  // --snapshot-dir: where a job that ends unfinished keeps its snapshots for the next run
  // (agent/snapshot_dir.h; empty: nowhere).
  std::string snapshot_dir;
  // How often the snapshots are also copied there while the job runs (0: only when it ends).
  std::chrono::milliseconds snapshot_dir_every{60000};
  // Warm workers (agent/warm_pool.h): park the next attempt's workers when the program allows it.
  bool warm_workers = true;

  // The live status (docs/DESIGN.md, "dtrun status"): rows are built this often.
  std::chrono::milliseconds status_interval{1000};
  std::optional<int> metrics_port;  // --metrics-port: serve /metrics and /status over HTTP
  std::string metrics_host;         // --metrics-host ("": every IPv4 address)
  bool progress_line = false;       // a status line below the workers' output (stdout is a terminal)
  std::string rdzv_endpoint;        // multi-node: the service, for `dtrun status` on this node

  // The agent's clock for its deadlines (grace before SIGKILL, exit barrier, quiet partial lines):
  // tests inject one that jumps to pass a deadline without waiting for it.
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
};

inline std::string ProgressSocketPath(const AgentOptions& o, int local_rank) {
  return launch_layout::ProgressSocket(o.progress_dir, local_rank);
}

// The agent's latest status rows (`dtrun.status/v1` JSON), for `dtrun status` on this machine.
inline std::string StatusSnapshotPath(const AgentOptions& o) { return launch_layout::StatusSnapshot(o.progress_dir); }

}  // namespace dtrun
