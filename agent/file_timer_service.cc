#include "agent/file_timer_service.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/signal_names.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace dtrun {

double UnixSecondsNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

FileTimerService::FileTimerService(EventLoop& loop, EventLog& events, std::function<Clock::time_point()> now,
                                   std::function<double()> unix_now)
    : loop_(loop), events_(events), now_(std::move(now)), unix_now_(std::move(unix_now)) {}

void FileTimerService::Open(const std::string& path) {
  absl::StatusOr<progress::TimerPipe> p = progress::TimerPipe::Create(path);
  if (!p.ok()) {
    spdlog::warn("{}; FileTimer requests are not served", std::string(p.status().message()));
    return;
  }
  pipe_ = std::move(*p);
  if (!loop_.Watch(pipe_->fd(), EPOLLIN, [this](uint32_t) { OnRequests(); })) {
    spdlog::warn("cannot watch the FileTimer pipe {}; FileTimer requests are not served", pipe_->path());
    pipe_.reset();
  }
}

void FileTimerService::OnRequests() {
  for (const std::string& line : pipe_->ReadLines()) {
    absl::StatusOr<progress::TimerRequest> r = progress::ParseTimerRequest(line);
    if (!r.ok()) {
      spdlog::warn("ignored a malformed FileTimer request: {}", std::string(r.status().message()));
      continue;
    }
    if (!timers_.Apply(*r)) spdlog::warn("{} FileTimers are armed; a new one is refused", timers_.size());
  }
}

std::optional<AgentComponent::Clock::time_point> FileTimerService::NextDeadline() const {
  std::optional<double> expiry = timers_.NextExpiry();
  if (!group_ || !expiry) return std::nullopt;
  const double seconds = std::clamp(*expiry - unix_now_(), 0.0, 86400.0 * 365);
  return now_() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void FileTimerService::OnWake(Clock::time_point /*now*/) {
  if (!group_ || timers_.size() == 0) return;
  for (const progress::TimerRequest& t : timers_.TakeExpired(unix_now_())) {
    const pid_t pid = static_cast<pid_t>(t.pid);
    const int lr = group_->LocalRankOf(pid);
    if (lr < 0) continue;  // a pid that is not (or no longer) one of our workers is never signalled
    const WorkerGroup::Worker& w = group_->workers()[lr];
    spdlog::warn("worker rank {} (pid {}): FileTimer '{}' expired{}", w.global_rank, pid, t.scope_id,
                 t.signal > 0 ? absl::StrCat("; sending ", SignalName(t.signal)) : "");
    events_.Record("timer_expired", round_,
                   {{"rank", w.global_rank}, {"local_rank", lr}, {"worker_pid", pid}, {"scope_id", t.scope_id},
                    {"signal", t.signal > 0 ? SignalName(t.signal) : ""}});
    if (t.signal > 0) ::kill(pid, t.signal);
  }
}

void FileTimerService::OnRoundStarted(WorkerGroup& group, const rdzv::Assignment& round) {
  group_ = &group;
  round_ = round.round;
}

void FileTimerService::OnGroupExited(WorkerGroup& /*group*/) {
  timers_.Clear();
  group_ = nullptr;
}

}  // namespace dtrun
