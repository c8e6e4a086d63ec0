#include "worker/stop_signal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>

namespace dtrun::worker {
namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{SIGTERM};
// One pipe for the life of the process, never closed: a handler that read the fd can never write
// into a descriptor reused for something else.
int g_pipe[2] = {-1, -1};
std::atomic<int> g_notify_fd{-1};

void OnStop(int signo) {
  g_stop_signal.store(signo);
  g_stop_requested.store(true);
  const int fd = g_notify_fd.load();
  if (fd >= 0) {
    const int saved = errno;
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);  // a full pipe already says it
    errno = saved;
  }
}

// The read end, or -1 when no pipe could be made (then no watcher is ever woken).
int StopPipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::perror("warning: no pipe for stop signals; no state is kept in memory when another rank fails");
      g_pipe[0] = g_pipe[1] = -1;
    }
  });
  return g_pipe[0];
}

void Drain(int fd) {
  char buf[64];
  while (::read(fd, buf, sizeof buf) > 0) {
  }
}

}  // namespace

void InstallStopSignalHandlers() {
  for (int signo : {SIGTERM, SIGUSR1, SIGUSR2}) ::signal(signo, OnStop);
}

bool StopRequested() { return g_stop_requested.load(); }
int StopSignal() { return g_stop_signal.load(); }

StopSignalWatcher::StopSignalWatcher(std::function<void()> on_stop) : on_stop_(std::move(on_stop)) {
  if (StopPipe() < 0) return;
  Drain(g_pipe[0]);  // signals from before this watcher are not its business
  g_notify_fd.store(g_pipe[1]);
  thread_ = std::thread(&StopSignalWatcher::Run, this);
}

StopSignalWatcher::~StopSignalWatcher() {
  if (!thread_.joinable()) return;
  g_notify_fd.store(-1);
  quit_.store(true);
  const char byte = 0;
  [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &byte, 1);
  thread_.join();
}

void StopSignalWatcher::Run() {
  pollfd p{g_pipe[0], POLLIN, 0};
  while (!quit_.load()) {
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
    Drain(g_pipe[0]);
    if (quit_.load()) return;
    try {
      on_stop_();
    } catch (...) {
      // on_stop_ says its own errors; nothing may leave this thread.
    }
  }
}

}  // namespace dtrun::worker
