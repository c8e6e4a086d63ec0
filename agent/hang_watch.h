// Hang detection as an agent component (docs/DESIGN.md, "Hang detection"): the heartbeat and
// section rules over the round's progress board, and workers stuck in D state. A hang found here,
// or one another node found (the rendezvous then asks every node for stacks), first collects
// every local worker's stacks while the ranks are still where they hung; then the culprit is named
// from the stacks and the hang reported. When every local rank waits in a collective on a job of
// several nodes, the report is held a moment for a node that has the culprit.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "agent/agent_component.h"
#include "agent/agent_options.h"
#include "agent/event_log.h"
#include "agent/hang_rules.h"
#include "agent/progress_channel.h"
#include "agent/stack_dumper.h"
#include "agent/worker_group.h"
#include "rendezvous/rendezvous_state.h"
#include "status/prometheus.h"

namespace dtrun {

class HangWatch : public AgentComponent {
 public:
  // Reports the round's failure (the agent adds the restart-loop verdict and tells the rendezvous).
  using ReportFn = std::function<void(WorkerFailure failure)>;
  // Whether the round still runs healthy with nothing reported: the rules apply only then.
  using RoundOpenFn = std::function<bool()>;
  // `view` is the agent's view of the job, read when a report is due.
  HangWatch(const AgentOptions& options, const AttemptPaths& paths, EventLog& events, status::AgentCounters& counters,
            const ProgressChannel& progress, const std::optional<rdzv::NodeView>& view, RoundOpenFn round_open,
            ReportFn report);

  // A hang was declared on this node this round: its report is the round's outcome.
  bool declared() const { return declared_; }
  // The local rank a declared hang names, until it is reported (-1: none).
  int hung_rank() const { return pending_ ? pending_->hang.local_rank : -1; }
  // Before the round's workers are stopped: true while that must wait, for stacks being collected
  // (`stacks` false skips asking for them: an interrupt) or a report held for another node.
  bool HoldsStop(bool stacks);
  // A reaped child: true if it was a stack tool.
  bool OnExit(pid_t pid) { return dumper_.OnExit(pid); }

  std::optional<Clock::time_point> NextDeadline() const override;
  void OnWake(Clock::time_point now) override;
  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) override;
  void OnGroupExited(WorkerGroup& group) override;  // a pending report goes out now: the workers are gone

 private:
  struct PendingHang {
    progress::Hang hang;
    std::string what;
    std::optional<WorkerFailure> failure;  // chosen once the stacks are in
    std::optional<Clock::time_point> report_after;
  };
  void CheckDState(Clock::time_point now);
  void Declare(const progress::Hang& hang, const std::string& what);
  bool Report();  // false while the report is held back
  WorkerFailure FailureOf(int local_rank) const;
  void StartStackDump();
  bool StackDumpPending();

  const AgentOptions& options_;
  const AttemptPaths& paths_;
  EventLog& events_;
  status::AgentCounters& counters_;
  const ProgressChannel& progress_;
  const std::optional<rdzv::NodeView>& view_;
  RoundOpenFn round_open_;
  ReportFn report_;

  WorkerGroup* group_ = nullptr;
  // When a worker of the round first exited successfully: the others are tearing down (the
  // heartbeat rule yields to --teardown-timeout).
  std::optional<Clock::time_point> group_done_;
  int64_t round_ = -1;
  int nodes_ = 1;
  bool declared_ = false;
  std::optional<PendingHang> pending_;  // declared, not yet reported
  StackDumper dumper_;
  int64_t stacks_taken_round_ = -1;
  DStateTracker dstate_;
  Clock::time_point next_dstate_check_;
};

}  // namespace dtrun
