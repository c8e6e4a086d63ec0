// The node agent: runs this node's workers for each round the rendezvous assigns, relays their
// output, reports their outcome, and follows the job: a round ended elsewhere stops the workers
// within one event; a failed job exits with the job-wide root cause. Event-driven: one epoll loop
// over a signalfd (SIGCHLD and the handled signals), the round source's fd and the workers'
// pipes; deadlines (grace before SIGKILL, exit barrier) are epoll timeouts. No polling interval.
//
// Worker group per round (torchelastic's names):
//   HEALTHY --a worker fails--> UNHEALTHY (reported; the others are stopped)
//   HEALTHY --all exit 0--> SUCCEEDED (reported; wait for the job's outcome: the exit barrier)
//   any     --round ended elsewhere | handled signal | job over--> STOPPED (signal, grace, SIGKILL)
#pragma once

#include <sys/epoll.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "agent/agent_options.h"
#include "agent/console.h"
#include "agent/event_log.h"
#include "agent/recovery_tracker.h"
#include "agent/replicator.h"
#include "agent/snapshot_store.h"
#include "agent/stack_dumper.h"
#include "agent/stdin_router.h"
#include "agent/worker_group.h"
#include "base/console_writer.h"
#include "base/unique_fd.h"
#include "progress/file_timer.h"
#include "progress/progress_board.h"
#include "progress/progress_socket.h"
#include "rendezvous/round_source.h"
#include "status/metrics_server.h"
#include "status/node_status.h"
#include "status/prometheus.h"
#include "status/resource_sampler.h"

namespace dtrun {

class Agent {
 public:
  // The caller blocks SIGCHLD and `signals_to_handle` in every thread before any thread starts
  // (see BlockAgentSignals), and keeps the workers' TCPStore serving while the agent runs.
  // Workers' output and dtrun's summary go to `stdio`, whose threads do the blocking writes.
  Agent(AgentOptions options, AttemptPaths paths, std::map<std::string, std::string> base_env,
        std::unique_ptr<rdzv::RoundSource> rounds, const StdioWriters& stdio);
  ~Agent();

  // Runs the job to the end. Returns dtrun's exit code: 0 on success, the job's root-cause code
  // (128 + signal if it was killed) on failure, 128 + signal if dtrun was interrupted, 1 if this
  // node could not take part (the reason is logged).
  int Run();
  // Multi-node jobs with snapshots: copy them to the buddy node and fetch what this node lacks
  // (agent/replicator.h). Called before Run.
  void SetReplication(BuddyReplication replication) { replication_ = std::move(replication); }

 private:
  void HandleEvents(const ::epoll_event* events, int n);
  void OnSignal(int signo);
  void OnRoundEvent();
  void ReapChildren();
  void OnGroupExited();
  void Step();  // decides what to do next from the current facts
  void StartRound(const rdzv::Assignment& assignment);
  WorkerGroup::Io RoundIo();  // where this node's workers write and read, and the warm pool
  void ParkForPromotion();    // a spare parks workers for the round it may be promoted into
  void StopGroup(int signo);
  // Between the stop signal and SIGKILL: --shutdown-timeout, or less after a failure (StopGroup).
  std::chrono::milliseconds StopGrace() const;
  bool Watch(int fd);  // adds `fd` to the loop's epoll set (readable)
  void WatchOutputs();
  void OnOutput(int fd);
  // Back-pressure: a worker stream whose console is congested is not read (its pipe fills and the
  // worker blocks, as on a console) until the console's writer wakes the loop.
  void PauseOutput(int fd);
  void ResumeOutputs();
  void ShowQuietOutput();  // partial lines (prompts, `\r` bars) whose quiet time has passed
  void KillStrays();
  void RecordExit(pid_t pid, int wait_status);
  void RecordEnd(int code);
  int timeout_ms() const;

  // Progress reports, hangs, stacks and FileTimers (agent_progress.cc).
  void OpenProgressChannels();
  void OnProgressReports(int local_rank);
  void OnTimerRequests();
  int LocalRankOf(pid_t pid) const;      // -1: not one of this round's workers or their groups
  int ProgressSocketRank(int fd) const;  // -1: not a progress socket
  void CheckProgress();              // hangs, D state and expired timers, at the loop's end
  void DeclareHang(const progress::Hang& hang, const std::string& what);
  // Once this node's stacks are in (called while group_ is still set): names the culprit and reports. Returns false while the report
  // is held back (every local rank waits in a collective: another node may have the culprit).
  bool ReportHang();
  WorkerFailure HangFailureOf(int local_rank) const;  // group_'s worker, as a hang report names it
  void CheckDState(std::chrono::steady_clock::time_point now);
  void ExpireTimers();
  void StartStackDump();
  bool StackDumpPending();           // true while stacks are still being collected
  void MarkIfNoProgress(WorkerFailure& failure) const;
  void RememberAttemptProgress();    // at the end of each attempt
  std::optional<std::chrono::steady_clock::time_point> ProgressDeadline() const;
  // The live status (agent_status.cc): the metrics endpoint at start, then rows every
  // status_interval for the snapshot file, the rendezvous, the metrics and the progress line.
  void StartStatusOutputs();
  void PublishStatus();
  status::NodeStatus BuildNodeStatus(std::chrono::steady_clock::time_point now);
  std::string WorkerState(const WorkerGroup::Worker& w) const;
  std::string ProgressLine(const status::NodeStatus& node) const;
  void Finish(int code) {
    warm_.Clear();
    RecordEnd(code);
    exit_code_ = code;
  }

  AgentOptions options_;
  AttemptPaths paths_;
  std::map<std::string, std::string> base_env_;
  std::unique_ptr<rdzv::RoundSource> rounds_;
  UniqueFd signal_fd_;
  UniqueFd epoll_fd_;
  StdioWriters stdio_;
  Consoles consoles_;
  std::vector<int> paused_outputs_;      // worker pipes taken out of the epoll set
  std::unique_ptr<StdinRouter> stdin_;  // created with the epoll set
  EventLog events_;

  std::optional<rdzv::NodeView> view_;   // the job as last seen
  std::string logged_reason_;            // the last round-change reason printed
  absl::Status source_error_;            // the round source gave up (master lost, rejected)
  std::unique_ptr<WorkerGroup> group_;   // this node's workers (null between rounds)
  int64_t group_round_ = -1;             // the round group_ (or the last group) ran
  int group_nodes_ = 1;                  // how many nodes run group_round_
  bool reported_ = false;                // group_round_'s outcome was reported
  std::vector<WorkerFailure> round_failures_;  // every failure of group_round_ on this node
  bool stopping_ = false;                // a stop signal was sent to group_
  bool killed_ = false;                  // SIGKILL was sent to group_
  std::chrono::steady_clock::time_point kill_deadline_;
  // The grace after a failure when every local rank's state is in an in-memory snapshot.
  static constexpr std::chrono::milliseconds kSnapshottedStopGrace{500};
  std::optional<std::chrono::steady_clock::time_point> barrier_deadline_;
  int interrupt_signal_ = 0;
  int signals_received_ = 0;
  std::optional<int> exit_code_;

  std::vector<progress::ProgressSocket> progress_sockets_;  // by local rank
  std::optional<progress::TimerPipe> timer_pipe_;
  progress::FileTimers timers_;
  std::unique_ptr<progress::ProgressBoard> board_;  // this round's reports (null between rounds)
  std::set<int> warned_ranks_;           // ranks whose malformed reports were already reported
  int64_t unknown_senders_ = 0;          // reports from processes that are not our workers
  StackDumper dumper_;
  bool hang_declared_ = false;           // this round: stacks first, then the report and the stop
  struct PendingHang {
    progress::Hang hang;
    std::string what;
    std::optional<WorkerFailure> failure;    // chosen once the stacks are in
    std::optional<std::chrono::steady_clock::time_point> report_after;
  };
  std::optional<PendingHang> pending_hang_;  // declared, not yet reported
  int64_t stacks_taken_round_ = -1;
  // Per worker: since when some thread has been in D state without running, and those threads
  // with their context-switch counts.
  struct StuckThreads {
    std::chrono::steady_clock::time_point since;
    std::map<pid_t, uint64_t> threads;
  };
  std::map<pid_t, StuckThreads> dstate_since_;
  std::chrono::steady_clock::time_point next_dstate_check_;
  // Restart-loop breaker: the best step of every earlier attempt, and how many attempts in a row
  // did not pass it.
  int64_t best_step_ever_ = -1;
  bool job_reports_ = false;
  int attempts_without_progress_ = 0;

  std::chrono::steady_clock::time_point next_status_at_;
  status::ResourceSampler sampler_;
  std::unique_ptr<status::MetricsServer> metrics_;
  status::AgentCounters counters_;
  // In-memory snapshots: the regions this node's workers write (held across restarts), and the
  // recovery under way (failure -> every local rank stepping again).
  SnapshotStore snapshots_;
  RecoveryTracker recovery_;
  std::optional<BuddyReplication> replication_;  // until Run makes the replicator
  std::unique_ptr<Replicator> replicator_;       // buddy copies (null: single node, or off)
  WarmPool warm_{options_.warm_workers};         // the next attempt's workers, parked
  void FillWarmPool();                           // once every local rank of the round stepped
  // Parked workers per local rank: 2 on several nodes (see WarmPool::Fill), else 1.
  int WarmDepth() const { return group_nodes_ > 1 ? 2 : 1; }
  bool StartBuddyReplication();                  // false: the job goes on without buddy copies
  void OnRecoveryReport(int local_rank, const progress::Report& report);
  bool status_write_warned_ = false;
};

// Blocks SIGCHLD and `signals` in the calling thread (threads created later inherit the mask).
void BlockAgentSignals(const std::vector<int>& signals);

}  // namespace dtrun
