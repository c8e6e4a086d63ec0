#include "agent/warm_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/env_names.h"
#include "base/park_message.h"
#include "base/signal_names.h"
#include "spdlog/spdlog.h"

namespace dtrun {
namespace {

bool SameCommand(const SpawnRequest& a, const SpawnRequest& b) {
  return a.executable == b.executable && a.argv == b.argv && a.inherit_fds == b.inherit_fds &&
         a.capture_output == b.capture_output && a.pipe_stdin == b.pipe_stdin && a.cpus == b.cpus;
}

// The pipe is fresh and non-blocking, the message far below its capacity: a write that does not
// take it all means the worker is gone or the environment is huge.
bool WriteRelease(int fd, const std::vector<std::string>& env) {
  const std::string message = EncodeRelease(env);
  return WriteAll(fd, message.data(), message.size());
}

}  // namespace

void WarmPool::Fill(const std::vector<SpawnRequest>& requests, int depth) {
  const size_t before = size_;
  for (int lr = 0; lr < static_cast<int>(requests.size()) && !off_; ++lr) {
    while (static_cast<int>(parked_[lr].size()) < depth && !off_) {
      absl::StatusOr<Pipe> pipe = MakePipe(/*nonblocking_read=*/false);
      if (!pipe.ok()) return TurnOff(std::string(pipe.status().message()));
      SpawnRequest parked = requests[lr];
      parked.env.push_back(absl::StrCat(env::kParkFd, "=", pipe->read.get()));
      parked.inherit_fds.push_back(pipe->read.get());
      absl::StatusOr<ChildProcess> process = ChildProcess::Spawn(parked);
      if (!process.ok()) return TurnOff(std::string(process.status().message()));
      // The writer must never block the agent's loop.
      ::fcntl(pipe->write.get(), F_SETFL, O_NONBLOCK);
      parked_[lr].push_back(Parked{requests[lr], std::move(*process), std::move(pipe->write)});
      ++size_;
      parked_before_ = true;
    }
  }
  if (size_ > before) {
    // Said once a run; later fills are routine.
    spdlog::log(std::exchange(said_, true) ? spdlog::level::debug : spdlog::level::info,
                "{} worker(s) of the next attempt started and parked: a restart releases them warm "
                "(--warm-workers off to keep none)", size_ - before);
  }
}

std::optional<ChildProcess> WarmPool::Release(int local_rank, const SpawnRequest& request) {
  auto it = parked_.find(local_rank);
  if (it == parked_.end() || it->second.empty()) return std::nullopt;
  Parked p = std::move(it->second.front());
  it->second.pop_front();
  --size_;
  if (!SameCommand(p.request, request) || !p.process.running() ||
      !WriteRelease(p.release.get(), request.env)) {
    return std::nullopt;  // `p` ends with this scope: its group is killed and reaped
  }
  return std::move(p.process);
}

bool WarmPool::OnExit(pid_t pid, int wait_status) {
  for (auto& [local_rank, queue] : parked_) {
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      if (it->process.pid() != pid) continue;
      it->process.MarkExited(wait_status);
      const std::string how = WIFSIGNALED(wait_status)
                                  ? absl::StrCat("killed by ", SignalName(WTERMSIG(wait_status)))
                                  : absl::StrCat("exit code ", WEXITSTATUS(wait_status));
      const int lr = local_rank;
      queue.erase(it);
      --size_;
      TurnOff(absl::StrCat("a parked worker (local rank ", lr, ") ended before a round needed it (", how, ")"));
      return true;
    }
  }
  return false;
}

bool WarmPool::Holds(pid_t pid) const {
  for (const auto& [lr, queue] : parked_) {
    for (const Parked& p : queue) {
      if (p.process.pid() == pid) return true;
    }
  }
  return false;
}

void WarmPool::TurnOff(const std::string& why) {
  if (off_) return;
  off_ = true;
  Clear();
  spdlog::warn("{}; restarts start their workers cold from now on", why);
}

}  // namespace dtrun
