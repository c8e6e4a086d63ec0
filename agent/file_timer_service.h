// torchelastic's FileTimer server as an agent component: workers write timer requests into a named
// pipe (TORCHELASTIC_TIMER_FILE); an expired timer's worker gets the signal it asked for. Only the
// running round's workers (or processes in their groups) are ever signalled. Timers are in
// wall-clock seconds, as the client writes them; the loop wakes at the earliest expiry.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "agent/agent_component.h"
#include "agent/event_log.h"
#include "base/event_loop.h"
#include "progress/file_timer.h"

namespace dtrun {

class FileTimerService : public AgentComponent {
 public:
  // `now` is the loop's clock; `unix_now` the wall clock in seconds (tests inject both).
  FileTimerService(EventLoop& loop, EventLog& events, std::function<Clock::time_point()> now,
                   std::function<double()> unix_now);
  // Creates the pipe at `path` and watches it. On failure, says so; the job runs without it.
  void Open(const std::string& path);
  size_t armed() const { return timers_.size(); }

  std::optional<Clock::time_point> NextDeadline() const override;
  void OnWake(Clock::time_point now) override;
  void OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) override;
  void OnGroupExited(WorkerGroup& group) override;  // a new round's workers start with no timers

 private:
  void OnRequests();

  EventLoop& loop_;
  EventLog& events_;
  std::function<Clock::time_point()> now_;
  std::function<double()> unix_now_;
  std::optional<progress::TimerPipe> pipe_;
  progress::FileTimers timers_;
  WorkerGroup* group_ = nullptr;
  int64_t round_ = -1;
};

// The wall clock in Unix seconds.
double UnixSecondsNow();

}  // namespace dtrun
