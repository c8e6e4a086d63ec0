// Every environment variable dtrun reads or writes, named once.
#pragma once

namespace dtrun::env {

// Written for workers (torchrun's contract).
inline constexpr char kRank[] = "RANK";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";
// torchrun's environment defaults for --shutdown-timeout and --signals-to-handle, and its log level.
inline constexpr char kShutdownTimeout[] = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT";
inline constexpr char kSignalsToHandle[] = "TORCHELASTIC_SIGNALS_TO_HANDLE";
inline constexpr char kLogLevel[] = "LOGLEVEL";
inline constexpr char kNcclAsyncErrorHandling[] = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
inline constexpr char kNcclSocketIfname[] = "NCCL_SOCKET_IFNAME";
// Hang evidence, unless the user set them: Python tracebacks on fatal signals, and PyTorch's NCCL
// flight recorder dumping each rank's last collectives into the attempt's log dir on a timeout.
inline constexpr char kPythonFaultHandler[] = "PYTHONFAULTHANDLER";
inline constexpr char kNcclTraceBufferSize[] = "TORCH_NCCL_TRACE_BUFFER_SIZE";
inline constexpr char kNcclDumpOnTimeout[] = "TORCH_NCCL_DUMP_ON_TIMEOUT";
inline constexpr char kNcclDebugInfoTempFile[] = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";

// Progress reports (docs/DESIGN.md, "Progress reports"): the agent's socket, where a worker's
// stacks go when the agent asks for them, and torchelastic's FileTimer pipe.
inline constexpr char kProgressSocket[] = "DTRUN_PROGRESS_SOCKET";
inline constexpr char kStacksFile[] = "DTRUN_STACKS_FILE";
inline constexpr char kEnableFileTimer[] = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr char kTimerFile[] = "TORCHELASTIC_TIMER_FILE";
inline constexpr char kPythonPath[] = "PYTHONPATH";

// In-memory snapshots (docs/DESIGN.md, "Snapshots"): the fd of the region the agent holds for
// this local rank, and --snapshot-every (0: adaptive).
inline constexpr char kSnapshotFd[] = "DTRUN_SNAPSHOT_FD";
inline constexpr char kSnapshotEvery[] = "DTRUN_SNAPSHOT_EVERY";
// "background": a worker copies parameters and optimizer state during the next step instead of
// between steps (worker/memory_snapshot.h); measured no cheaper on a CPU whose cores all train.
inline constexpr char kSnapshotCopy[] = "DTRUN_SNAPSHOT_COPY";
// "off": a worker does not keep its state in memory when it fails before its next optimizer step
// (worker/memory_snapshot.h, Rescue), and snapshots keep the larger budget.
inline constexpr char kSnapshotOnFailure[] = "DTRUN_SNAPSHOT_ON_FAILURE";
// "lagged": the ranks' vote after each step (stop, save, snapshot, the replica check) is read a
// step later and acted on then, by every rank alike; "at-once": read before the next step. The
// default is lagged where the step runs on GPUs in several processes (worker/step_agreement.h),
// at once elsewhere.
inline constexpr char kStepVote[] = "DTRUN_STEP_VOTE";
// "0": native workers send no `sync` reports (their all-reduce waits), for measuring what the
// straggler watch costs (bench/stragglers.py); nobody is named then.
inline constexpr char kSyncReports[] = "DTRUN_SYNC_REPORTS";
// "off" (or "0"): a rank restores only its own in-memory snapshots of the current world size,
// for a trainer whose ranks hold different state (snapshot/peer_restores.h).
inline constexpr char kSnapshotPeers[] = "DTRUN_SNAPSHOT_PEERS";
// The second region of a multi-node job: this rank's snapshots that also live on the buddy node,
// or were fetched from it (agent/replicator.h).
inline constexpr char kSnapshotReplicaFd[] = "DTRUN_SNAPSHOT_REPLICA_FD";
// The libxxhash dtrun itself loaded: the Python module's snapshots (python/dtrun/_snapshots.py)
// hash as the C++ side does, and find it there on a machine with no libxxhash of its own.
inline constexpr char kXxhashLibrary[] = "DTRUN_XXHASH_LIBRARY";

// Warm workers (docs/DESIGN.md, "Warm workers"): set only in a worker started ahead of its round;
// the read end of the pipe on which the agent releases it (base/park_message.h).
inline constexpr char kParkFd[] = "DTRUN_PARK_FD";
// What kParkFd reads as in /proc/PID/environ once the worker was released (the rest of that block
// is the environment it was parked with; its round's is in its memory).
inline constexpr char kWarmFd[] = "DTRUN_WARM_FD";

// dtrun's own marker: every process of one launch carries it, so `dtrun kill` and the
// launch guard find workers and their descendants without guessing by process name.
inline constexpr char kLaunchId[] = "DTRUN_LAUNCH_ID";

// Read by dtrun.
inline constexpr char kPythonExec[] = "PYTHON_EXEC";
inline constexpr char kLogLinePrefixTemplate[] = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE";
inline constexpr char kRuntimeDir[] = "XDG_RUNTIME_DIR";
inline constexpr char kDtrunRuntimeDir[] = "DTRUN_RUNTIME_DIR";
// The rendezvous token: read by dtrun, never passed on to workers.
inline constexpr char kRdzvToken[] = "DTRUN_RDZV_TOKEN";

}  // namespace dtrun::env
