#include "progress/progress_socket.h"

#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "progress/report_protocol.h"

namespace dtrun::progress {

absl::StatusOr<ProgressSocket> ProgressSocket::Bind(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the progress socket path ", path, " is longer than a Unix socket allows (",
        sizeof(addr.sun_path) - 1, " bytes); set DTRUN_RUNTIME_DIR to a shorter directory"));
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return absl::FailedPreconditionError(absl::StrCat("cannot create the progress socket: ", strerror(errno)));
  int on = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
  // Bounds what a flood can hold in the kernel for us (the kernel doubles it for bookkeeping).
  int buffer = 256 << 10;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cannot bind the progress socket ", path, ": ", strerror(errno)));
  }
  return ProgressSocket(std::move(fd), path);
}

ProgressSocket::~ProgressSocket() {
  if (fd_.valid()) ::unlink(path_.c_str());
}

int ProgressSocket::Drain(int max, const std::function<void(pid_t, absl::string_view)>& on) {
  int n = 0;
  char data[kMaxReportBytes + 1];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
  for (; n < max; ++n) {
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t got = ::recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
    if (got < 0) break;  // EAGAIN: drained
    pid_t pid = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        pid = cred.pid;
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        // A client that passes fds must not make us leak them.
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int passed;
          memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          ::close(passed);
        }
      }
    }
    if (static_cast<size_t>(got) > kMaxReportBytes || pid <= 0 || (msg.msg_flags & MSG_CTRUNC)) {
      ++dropped_;
      continue;
    }
    on(pid, absl::string_view(data, static_cast<size_t>(got)));
  }
  return n;
}

}  // namespace dtrun::progress
