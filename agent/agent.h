// The node agent: runs this node's workers for each round the rendezvous assigns, relays their
// output, reports their outcome, and follows the job: a round ended elsewhere stops the workers
// within one event; a failed job exits with the job-wide root cause. Event-driven: one EventLoop
// over a signalfd (SIGCHLD and the handled signals) and the round source's fd; deadlines (grace
// before SIGKILL, exit barrier) are its timeouts. No polling interval. Every other concern is an
// AgentComponent on the same loop (agent/agent_component.h): the workers' console, progress
// reports, hang detection, FileTimers, in-memory snapshots and their recovery, the live status.
// The Agent runs rounds: their start, failure, stop and success, warm workers, the exit barrier,
// and the restart-loop breaker's verdict.
//
// Worker group per round (torchelastic's names):
//   HEALTHY --a worker fails--> UNHEALTHY (reported; the others are stopped)
//   HEALTHY --all exit 0--> SUCCEEDED (reported; wait for the job's outcome: the exit barrier)
//   any     --round ended elsewhere | handled signal | job over--> STOPPED (signal, grace, SIGKILL)
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent/agent_component.h"
#include "agent/agent_options.h"
#include "agent/console.h"
#include "agent/event_log.h"
#include "agent/file_timer_service.h"
#include "agent/hang_watch.h"
#include "agent/progress_channel.h"
#include "agent/replicator.h"
#include "agent/restart_loop_breaker.h"
#include "agent/snapshot_recovery.h"
#include "agent/status_publisher.h"
#include "agent/stop_deadline.h"
#include "agent/worker_console.h"
#include "agent/worker_group.h"
#include "base/console_writer.h"
#include "base/event_loop.h"
#include "base/unique_fd.h"
#include "progress/progress_board.h"
#include "rendezvous/round_source.h"
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
  bool StartLoop();  // the event loop and every component on it; false: cannot (logged)
  void OnSignals();
  void OnSignal(int signo);
  void OnRoundEvent();
  void ReapChildren();
  void OnGroupExited();
  void Step();  // decides what to do next from the current facts
  void StartRound(const rdzv::Assignment& assignment);
  WorkerGroup::Io RoundIo();  // where this node's workers write and read, and the warm pool
  void ParkForPromotion();    // a spare parks workers for the round it may be promoted into
  void StopGroup(int signo);
  void KillAfterGrace();      // SIGKILL once the stop grace has passed
  // Between the stop signal and SIGKILL: --shutdown-timeout, or less after a failure (StopGroup).
  std::chrono::milliseconds StopGrace() const;
  std::optional<std::chrono::steady_clock::time_point> NextDeadline() const;
  void KillStrays();
  void RecordExit(pid_t pid, int wait_status);
  void RecordEnd(int code);
  void OnReport(int local_rank, const progress::Report& report);  // from the progress channel
  // The round's outcome is reported: a failure, success, or a hang declared here.
  bool OutcomeReported() const { return reported_ || (hangs_ && hangs_->declared()); }
  const progress::ProgressBoard* board() const { return progress_ ? progress_->board() : nullptr; }

  // This node's rows for the live status (agent_status.cc).
  StatusPublisher::Snapshot DescribeNode(std::chrono::steady_clock::time_point now);
  std::string WorkerState(const WorkerGroup::Worker& w) const;
  void Finish(int code) {
    warm_.Clear();
    if (snapshots_) {
      const bool stopped = interrupt_signal_ != 0 || (view_ && view_->phase == rdzv::JobPhase::kKilled);
      snapshots_->OnJobEnd(code == 0 ? SnapshotRecovery::JobEnd::kSucceeded
                           : stopped ? SnapshotRecovery::JobEnd::kStopped
                                     : SnapshotRecovery::JobEnd::kFailed);
    }
    RecordEnd(code);
    exit_code_ = code;
  }

  AgentOptions options_;
  AttemptPaths paths_;
  std::map<std::string, std::string> base_env_;
  std::unique_ptr<rdzv::RoundSource> rounds_;
  StdioWriters stdio_;
  Consoles consoles_;
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
  StopDeadline stop_;                    // when the stop of group_ turns to SIGKILL
  std::optional<std::chrono::steady_clock::time_point> barrier_deadline_;
  int interrupt_signal_ = 0;
  int signals_received_ = 0;
  std::optional<int> exit_code_;

  RestartLoopBreaker breaker_{options_.max_attempts_without_progress};  // judges each failure

  status::ResourceSampler sampler_;
  // By local rank: the newest all-reduce wait put into a status summary (-1: none), in waits_round_.
  std::vector<int64_t> waits_sent_;
  int64_t waits_round_ = -1;
  status::AgentCounters counters_;
  std::optional<BuddyReplication> replication_;  // until Run starts the snapshot component
  WarmPool warm_{options_.warm_workers};         // the next attempt's workers, parked
  const OomKillCounter oom_;                     // names the out-of-memory killer in failures
  void FillWarmPool();                           // once every local rank of the round stepped
  const WorkerGroup::Worker* ReportingWorker(int local_rank) const;
  void RecordDivergence(int local_rank, const progress::Report& report);
  void OnStateKeeping(int local_rank);
  void OnKeepingEnded(int local_rank, const progress::Report& report);  // kept or not_kept
  // Parked workers per local rank: 2 on several nodes (see WarmPool::Fill), else 1.
  int WarmDepth() const { return group_nodes_ > 1 ? 2 : 1; }

  // The loop and its components (made by Run, in this order; destroyed before the loop).
  UniqueFd signal_fd_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<WorkerConsole> console_;
  std::unique_ptr<SnapshotRecovery> snapshots_;
  std::unique_ptr<ProgressChannel> progress_;
  std::unique_ptr<FileTimerService> timers_;
  std::unique_ptr<HangWatch> hangs_;
  std::unique_ptr<StatusPublisher> status_;
  AgentComponents components_;
};

// Blocks SIGCHLD and `signals` in the calling thread (threads created later inherit the mask).
void BlockAgentSignals(const std::vector<int>& signals);

}  // namespace dtrun
