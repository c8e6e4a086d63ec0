// Workers' progress reports as an agent component (docs/DESIGN.md, "Progress reports"): one
// datagram socket per local rank, read without blocking; a report counts only when it comes from
// that rank's worker of the running round (or a process in its group) and parses. Each one updates
// the round's ProgressBoard and is handed on (hang rules, snapshots, warm workers).
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "agent/agent_component.h"
#include "agent/agent_options.h"
#include "base/event_loop.h"
#include "progress/progress_board.h"
#include "progress/progress_socket.h"
#include "progress/report_protocol.h"

namespace dtrun {

class ProgressChannel : public AgentComponent {
 public:
  using OnReport = std::function<void(int local_rank, const progress::Report& report)>;
  ProgressChannel(EventLoop& loop, const AgentOptions& options, OnReport on_report);
  ~ProgressChannel() override;
  // Binds a socket per local rank (--progress-dir). On failure, says so; reports are then off.
  void Open();

  // The running round's reports, or the last round's once its workers are gone (null before the
  // first round): the restart-loop breaker reads them after the group exited.
  const progress::ProgressBoard* board() const { return board_.get(); }
  // Reads what is already waiting on every socket. Called before workers are reaped: a worker's
  // last reports (its step, a kept state) count only while it is still a worker of the round.
  void ReadPending();

  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) override;
  void OnGroupExited(WorkerGroup& group) override;

 private:
  void OnReports(int socket_rank);

  EventLoop& loop_;
  const AgentOptions& options_;
  OnReport on_report_;
  std::vector<progress::ProgressSocket> sockets_;  // by local rank
  std::unique_ptr<progress::ProgressBoard> board_;
  WorkerGroup* group_ = nullptr;  // the running round's workers
  std::set<int> warned_ranks_;    // ranks whose malformed reports were already reported
  int64_t unknown_senders_ = 0;   // reports from processes that are not our workers
};

}  // namespace dtrun
