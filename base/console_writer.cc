#include "base/console_writer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "base/checked_mutex.h"
#include "base/guarded_thread.h"
#include "base/unique_fd.h"

namespace dtrun {

using Clock = std::chrono::steady_clock;

// Shared by the writer thread and every caller; `mu` guards all that changes (clang checks it:
// DTRUN_WERROR builds with -Wthread-safety). A CheckedMutex, not absl::Mutex: the TSan build must
// see this lock (base/checked_mutex.h).
struct ConsoleWriter::State {
  State(int fd, size_t high_water) : fd(fd), high_water(high_water) {}

  size_t queued() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return pending.size() + in_flight; }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !pending.empty() || closing || status_dirty; }
  void Wake() const {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake.get(), &one, sizeof(one));
  }
  // After the writer has made progress: tells the event loop what it may be waiting for.
  void AfterProgress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (was_congested && queued() <= high_water / 2) {
      was_congested = false;
      Wake();
    }
    if (want_empty && queued() == 0) {
      want_empty = false;
      Wake();
    }
  }
  bool WriteChunk(const char* data, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Run() ABSL_LOCKS_EXCLUDED(mu);
  // Wraps `batch` (maybe empty) in the status line's erase and redraw.
  void FrameWithStatusLine(std::string& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const int fd;
  const size_t high_water;
  const UniqueFd wake{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  mutable CheckedMutex mu;
  CheckedCondVar has_work{&mu};                         // the thread waits on it
  CheckedCondVar thread_done{&mu};
  std::string pending ABSL_GUARDED_BY(mu);              // queued, not yet taken by the thread
  size_t in_flight ABSL_GUARDED_BY(mu) = 0;             // taken by the thread, not yet written
  bool was_congested ABSL_GUARDED_BY(mu) = false;       // someone saw congested(): wake them when it clears
  bool want_empty ABSL_GUARDED_BY(mu) = false;          // WaitWritten is waiting for an empty queue
  bool broken ABSL_GUARDED_BY(mu) = false;              // the reader is gone: bytes are dropped
  bool idle ABSL_GUARDED_BY(mu) = false;                // the thread waits for work: signal it
  bool closing ABSL_GUARDED_BY(mu) = false;
  bool done ABSL_GUARDED_BY(mu) = false;
  uint64_t dropped_logs ABSL_GUARDED_BY(mu) = 0;
  Clock::time_point last_progress ABSL_GUARDED_BY(mu) = Clock::now();
  std::string status_line ABSL_GUARDED_BY(mu);          // SetStatusLine's text ("" for none)
  bool status_dirty ABSL_GUARDED_BY(mu) = false;        // it changed since it was last drawn
  bool status_shown ABSL_GUARDED_BY(mu) = false;        // it is on the terminal now (the cursor is at its end)
  bool at_line_start ABSL_GUARDED_BY(mu) = true;        // the last byte written was a newline
  bool line_open ABSL_GUARDED_BY(mu) = false;           // the last byte queued was not a newline
  uint64_t lines_ended_by_logs ABSL_GUARDED_BY(mu) = 0;
};

void ConsoleWriter::State::FrameWithStatusLine(std::string& batch) {
  constexpr char kEraseLine[] = "\r\033[K";
  status_dirty = false;
  if (!status_shown && status_line.empty()) return;
  if (!batch.empty()) at_line_start = batch.back() == '\n';
  std::string framed = status_shown ? kEraseLine : "";
  framed += batch;
  status_shown = at_line_start && !status_line.empty();
  if (status_shown) {
    winsize ws{};
    const size_t width = ::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 79;
    framed.append(status_line, 0, std::min(width, status_line.size()));
  }
  batch.swap(framed);
}

// Writes one chunk with `mu` released while the kernel takes it; false if the reader is gone.
bool ConsoleWriter::State::WriteChunk(const char* data, size_t size) {
  while (size > 0) {
    mu.Unlock();
    ssize_t n = ::write(fd, data, size);
    const int err = errno;
    if (n < 0 && err == EAGAIN) {
      // Someone made the shared file description non-blocking (a terminal shared with another
      // program): wait for room instead of taking it for a gone reader.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
    }
    mu.Lock();
    if (n < 0 && (err == EINTR || err == EAGAIN)) continue;
    if (n <= 0) return false;
    in_flight -= static_cast<size_t>(n);
    last_progress = Clock::now();
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void ConsoleWriter::State::Run() {
  constexpr size_t kChunk = 64 * 1024;  // progress (and congestion's end) is seen per chunk
  std::string batch;
  CheckedMutexLock lock(&mu);
  for (;;) {
    idle = true;
    has_work.Wait([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return HasWork(); });
    idle = false;
    if (pending.empty() && !status_dirty) break;
    batch.swap(pending);
    FrameWithStatusLine(batch);
    in_flight = batch.size();
    for (size_t at = 0; at < batch.size() && !broken; at += kChunk) {
      if (!WriteChunk(batch.data() + at, std::min(kChunk, batch.size() - at))) {
        broken = true;  // EPIPE and friends: as before, output to a gone reader is dropped
        pending.clear();
      }
      AfterProgress();
    }
    in_flight = 0;
    batch.clear();
    AfterProgress();
  }
  done = true;
  thread_done.SignalAll();
}

ConsoleWriter::ConsoleWriter(int fd, size_t high_water)
    : state_(std::make_shared<State>(fd, high_water)) {
  // The thread takes no signals (it inherits the mask it is created with): the agent takes the
  // ones it handles through a signalfd, and any other thread could take them first.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread([state = state_] {
    RunGuarded("console writer", [&] { state->Run(); }, [&](const absl::Status&) {
      CheckedMutexLock lock(&state->mu);  // as a gone reader: later bytes are dropped
      state->broken = true;
      state->pending.clear();
      state->in_flight = 0;
      state->done = true;
      state->thread_done.SignalAll();
      state->Wake();
    });
  }).detach();
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

ConsoleWriter::~ConsoleWriter() {
  State* const state = state_.get();
  CheckedMutexLock lock(&state->mu);
  // What a stuck reader has not taken by now is dropped; a thread blocked in write(2) keeps the
  // state alive and ends with the process.
  state->pending.clear();
  state->closing = true;
  state->has_work.SignalAll();
  if (state->in_flight == 0) {
    state->thread_done.Wait([state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) { return state->done; });
  }
}

uint64_t ConsoleWriter::Write(std::string& bytes, const LineJoin* join) {
  CheckedMutexLock lock(&state_->mu);
  if (bytes.empty()) return state_->lines_ended_by_logs;
  if (join != nullptr && join->log_breaks != state_->lines_ended_by_logs) {
    // A log line ended the open line since the bytes were put together.
    if (join->ends_line) {
      bytes.erase(0, 1);
    } else {
      bytes.insert(0, join->prefix);
    }
  }
  if (!state_->broken && !bytes.empty()) {
    // Taking the caller's buffer whole saves a copy; it gets an empty one back to fill again.
    state_->line_open = bytes.back() != '\n';
    if (state_->pending.empty()) {
      state_->pending.swap(bytes);
    } else {
      state_->pending.append(bytes);
    }
    if (state_->idle) state_->has_work.SignalAll();
  }
  bytes.clear();
  return state_->lines_ended_by_logs;
}

bool ConsoleWriter::WriteLog(absl::string_view line) {
  CheckedMutexLock lock(&state_->mu);
  if (state_->broken) return false;
  if (state_->queued() > 4 * state_->high_water) {
    ++state_->dropped_logs;
    return false;
  }
  // A log line is whole on the console: a worker's open line (a prompt, a progress bar) is ended
  // first, not continued by "[dtrun] ...".
  if (state_->line_open) {
    state_->pending.push_back('\n');
    ++state_->lines_ended_by_logs;
  }
  state_->line_open = !line.empty() && line.back() != '\n';
  if (state_->dropped_logs > 0) {
    absl::StrAppend(&state_->pending, "[dtrun] ", state_->dropped_logs,
                    " log line(s) dropped while the console was not being read\n");
    state_->dropped_logs = 0;
  }
  state_->pending.append(line.data(), line.size());
  if (state_->idle) state_->has_work.SignalAll();
  return true;
}

uint64_t ConsoleWriter::lines_ended_by_logs() const {
  CheckedMutexLock lock(&state_->mu);
  return state_->lines_ended_by_logs;
}

bool ConsoleWriter::congested() const {
  CheckedMutexLock lock(&state_->mu);
  if (state_->queued() <= state_->high_water) return false;
  state_->was_congested = true;
  return true;
}

void ConsoleWriter::SetStatusLine(std::string line) {
  CheckedMutexLock lock(&state_->mu);
  if (line == state_->status_line) return;
  state_->status_line = std::move(line);
  state_->status_dirty = true;
  if (state_->idle) state_->has_work.SignalAll();
}

int ConsoleWriter::wake_fd() const { return state_->wake.get(); }

void ConsoleWriter::ClearWake() {
  uint64_t count;
  [[maybe_unused]] ssize_t n = ::read(state_->wake.get(), &count, sizeof(count));
}

size_t ConsoleWriter::unwritten() const {
  CheckedMutexLock lock(&state_->mu);
  return state_->broken ? 0 : state_->queued();
}

bool ConsoleWriter::WaitWritten(int interrupt_fd, std::chrono::milliseconds stall_limit) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    Clock::time_point stalled_since;
    {
      CheckedMutexLock lock(&state_->mu);
      if (state_->queued() == 0 || state_->broken) return true;
      state_->want_empty = true;
      stalled_since = std::max(start, state_->last_progress);
    }
    int timeout = -1;
    if (stall_limit < kNoStallLimit) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(stalled_since + stall_limit - Clock::now());
      if (left.count() <= 0) return false;
      timeout = static_cast<int>(std::min<int64_t>(left.count(), INT_MAX));
    }
    pollfd fds[2] = {{state_->wake.get(), POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    int n = ::poll(fds, interrupt_fd >= 0 ? 2 : 1, timeout);
    if (n > 0 && interrupt_fd >= 0 && (fds[1].revents & POLLIN)) return false;
    if (n > 0 && (fds[0].revents & POLLIN)) ClearWake();
  }
}

namespace {

bool SameFile(int a, int b) {
  struct stat sa, sb;
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

StdioWriters StdioWriters::Start() {
  StdioWriters w;
  w.out = std::make_shared<ConsoleWriter>(STDOUT_FILENO);
  w.err = SameFile(STDOUT_FILENO, STDERR_FILENO) ? w.out : std::make_shared<ConsoleWriter>(STDERR_FILENO);
  return w;
}

}  // namespace dtrun
