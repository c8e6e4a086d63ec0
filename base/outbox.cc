#include "base/outbox.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>

namespace dtrun {

namespace {
constexpr int kMaxIovecs = 64;  // per call: far below IOV_MAX, enough to fill any socket buffer
}  // namespace

template <class WriteFn>
bool Outbox::Drain(WriteFn write_some) {
  while (!bytes_.empty()) {
    iovec iov[kMaxIovecs];
    int n_iov = 0;
    for (absl::string_view chunk : bytes_.Chunks()) {
      iov[n_iov].iov_base = const_cast<char*>(chunk.data());
      iov[n_iov].iov_len = chunk.size();
      if (++n_iov == kMaxIovecs) break;
    }
    ssize_t n = write_some(iov, n_iov);
    if (n > 0) {
      bytes_.RemovePrefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

bool Outbox::SendTo(int fd) {
  return Drain([fd](iovec* iov, int n_iov) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    return ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  });
}

bool Outbox::WriteTo(int fd) {
  return Drain([fd](iovec* iov, int n_iov) { return ::writev(fd, iov, n_iov); });
}

}  // namespace dtrun
