// The workers' side of dtrun's console, as an agent component: each worker's stdout and stderr
// relayed whole lines at a time, partial lines (prompts, `\r` bars) shown once quiet, dtrun's stdin
// routed to the worker that prompts. Back-pressure: a stream whose console is congested is not
// read (its pipe fills and the worker blocks, as on a console) until the console's writer wakes
// the loop.
#pragma once

#include <memory>
#include <vector>

#include "agent/agent_component.h"
#include "agent/console.h"
#include "agent/stdin_router.h"
#include "base/console_writer.h"
#include "base/event_loop.h"

namespace dtrun {

class WorkerConsole : public AgentComponent {
 public:
  WorkerConsole(EventLoop& loop, const StdioWriters& stdio, const Consoles& consoles);
  // Watches the console writers' wake fds and dtrun's stdin. False (errno set) if epoll refuses.
  bool Start(int stdin_fd, bool input_echoed_elsewhere = false);

  // Whether the workers read a pipe the router feeds (otherwise they inherit dtrun's stdin).
  bool routes_stdin() const { return stdin_ && stdin_->mode() == StdinRouter::Mode::kRouted; }

  std::optional<Clock::time_point> NextDeadline() const override;  // the earliest quiet partial line
  void OnWake(Clock::time_point now) override;
  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) override;
  void OnGroupExited(WorkerGroup& group) override;  // reads what the pipes still hold, closes them

 private:
  void OnOutput(int local_rank, bool is_stderr);
  void ResumeOutputs();

  EventLoop& loop_;
  StdioWriters stdio_;
  Consoles consoles_;
  std::unique_ptr<StdinRouter> stdin_;
  WorkerGroup* group_ = nullptr;   // the running round's workers (null between rounds)
  std::vector<int> paused_;        // worker pipes out of the epoll set while their console is congested
};

}  // namespace dtrun
