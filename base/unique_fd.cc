#include "base/unique_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace dtrun {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

absl::StatusOr<Pipe> MakePipe(bool nonblocking_read) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("pipe2: ", strerror(errno)));
  }
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  if (nonblocking_read) {
    ::fcntl(p.read.get(), F_SETFL, ::fcntl(p.read.get(), F_GETFL) | O_NONBLOCK);
  }
  return p;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace dtrun
