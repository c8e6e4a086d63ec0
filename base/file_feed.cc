#include "base/file_feed.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <system_error>

#include "absl/strings/str_cat.h"

namespace dtrun {
namespace {

void Copy(int from, UniqueFd to) noexcept {
  // A reader gone makes write() fail with EPIPE here; the signal stays blocked on this thread.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
  char buf[16 * 1024];
  for (;;) {
    const ssize_t n = ::read(from, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !WriteAll(to.get(), buf, static_cast<size_t>(n))) return;  // end, or the reader left
  }
}

}  // namespace

bool IsRegularFile(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

absl::StatusOr<std::unique_ptr<FileFeed>> FileFeed::Start(int file_fd) {
  absl::StatusOr<Pipe> pipe = MakePipe(/*nonblocking_read=*/true);
  if (!pipe.ok()) return pipe.status();
  std::unique_ptr<FileFeed> feed(new FileFeed(std::move(pipe->read)));
  try {
    feed->thread_ = std::thread(Copy, file_fd, std::move(pipe->write));
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(absl::StrCat("no thread to read the file on stdin: ", e.what()));
  }
  return feed;
}

FileFeed::~FileFeed() {
  read_.Reset();  // a write blocked on a full pipe fails now
  if (thread_.joinable()) thread_.join();
}

}  // namespace dtrun
