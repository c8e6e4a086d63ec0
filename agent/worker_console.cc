#include "agent/worker_console.h"

#include <string.h>

#include <algorithm>
#include <utility>

#include "spdlog/spdlog.h"

namespace dtrun {

WorkerConsole::WorkerConsole(EventLoop& loop, const StdioWriters& stdio, const Consoles& consoles)
    : loop_(loop), stdio_(stdio), consoles_(consoles) {}

bool WorkerConsole::Start(int stdin_fd, bool input_echoed_elsewhere) {
  auto wake = [this](uint32_t) {
    stdio_.out->ClearWake();
    stdio_.err->ClearWake();
    ResumeOutputs();
  };
  if (!loop_.Watch(stdio_.out->wake_fd(), EPOLLIN, wake)) return false;
  if (stdio_.err != stdio_.out && !loop_.Watch(stdio_.err->wake_fd(), EPOLLIN, wake)) return false;
  stdin_ = std::make_unique<StdinRouter>(stdin_fd, loop_, input_echoed_elsewhere);
  return true;
}

std::optional<AgentComponent::Clock::time_point> WorkerConsole::NextDeadline() const {
  std::optional<Clock::time_point> next;
  if (!group_) return next;
  for (const WorkerGroup::Worker& w : std::as_const(*group_).workers()) {
    for (const OutputRelay* relay : {w.out.get(), w.err.get()}) {
      std::optional<Clock::time_point> quiet = relay->quiet_deadline();
      if (quiet && (!next || *quiet < *next)) next = quiet;
    }
  }
  return next;
}

void WorkerConsole::OnWake(Clock::time_point now) {
  if (group_) {
    for (WorkerGroup::Worker& w : group_->workers()) {
      for (OutputRelay* relay : {w.out.get(), w.err.get()}) {
        relay->ShowIfQuiet(now);
        if (relay->TakePrompted()) stdin_->OnPrompt(w.local_rank);
      }
    }
  }
  if (stdin_->TakeEchoedLine()) consoles_.ForgetOpenLines();
}

void WorkerConsole::OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& /*round*/) {
  group_ = &group;
  std::map<int, UniqueFd> stdins;
  for (WorkerGroup::Worker& w : group.workers()) {
    for (bool is_stderr : {false, true}) {
      UniqueFd& fd = is_stderr ? w.process.stderr_fd() : w.process.stdout_fd();
      // A pipe that cannot be watched would never be drained: close it (the worker's writes then
      // fail) rather than let the worker block on a full pipe.
      const int lr = w.local_rank;
      if (fd.valid() && !loop_.Watch(fd.get(), EPOLLIN, [this, lr, is_stderr](uint32_t) { OnOutput(lr, is_stderr); })) {
        spdlog::warn("cannot watch a worker's output ({}); its output is dropped", strerror(errno));
        fd.Reset();
      }
    }
    stdins[w.local_rank] = std::move(w.process.stdin_fd());
  }
  stdin_->SetWorkers(std::move(stdins));
}

void WorkerConsole::OnOutput(int local_rank, bool is_stderr) {
  if (!group_) return;
  WorkerGroup::Worker& w = group_->workers()[local_rank];
  UniqueFd& pipe = is_stderr ? w.process.stderr_fd() : w.process.stdout_fd();
  OutputRelay& relay = is_stderr ? *w.err : *w.out;
  if (relay.congested()) {
    // Out of the epoll set, not just muted: a muted fd would still report an exited worker's hang-up.
    if (loop_.SetInterest(pipe.get(), 0)) paused_.push_back(pipe.get());
    return;
  }
  if (!relay.DrainFrom(pipe.get(), loop_.now())) {
    relay.Flush();
    loop_.Unwatch(pipe.get());
    pipe.Reset();
  }
}

void WorkerConsole::ResumeOutputs() {
  if (paused_.empty()) return;  // most wakes: the console's queue emptied, nothing was held back
  const std::vector<int> resumed = std::exchange(paused_, {});
  for (int fd : resumed) {
    if (!loop_.SetInterest(fd, EPOLLIN)) spdlog::warn("cannot watch a worker's output again: {}", strerror(errno));
  }
  // A line held when reading stopped is not a prompt: its rest may be in the pipe, read next.
  if (!group_) return;
  auto was_paused = [&](const UniqueFd& fd) {
    return fd.valid() && std::find(resumed.begin(), resumed.end(), fd.get()) != resumed.end();
  };
  for (WorkerGroup::Worker& w : group_->workers()) {
    if (was_paused(w.process.stdout_fd())) w.out->ReadingResumed(loop_.now());
    if (was_paused(w.process.stderr_fd())) w.err->ReadingResumed(loop_.now());
  }
}

void WorkerConsole::OnGroupExited(WorkerGroup& group) {
  for (WorkerGroup::Worker& w : group.workers()) {
    for (UniqueFd* fd : {&w.process.stdout_fd(), &w.process.stderr_fd()}) {
      if (fd->valid()) loop_.Unwatch(fd->get());
    }
  }
  group.DrainAndCloseOutputs();
  paused_.clear();  // their pipes are closed
  stdin_->SetWorkers({});
  group_ = nullptr;
}

}  // namespace dtrun
