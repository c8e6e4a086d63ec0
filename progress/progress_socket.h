// The agent's end of the progress protocol: a Unix datagram socket in the launch's private
// runtime dir (0700, so only this user reaches it). Datagrams keep a broken client harmless: each
// report stands alone, a flood only fills the socket's bounded queue (clients send without
// blocking and lose what does not fit), and the kernel names the sender's pid (SO_PASSCRED).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace dtrun::progress {

class ProgressSocket {
 public:
  // Binds `path` (an old socket file there is replaced). FailedPrecondition names the path when
  // it is too long for a Unix socket or cannot be bound.
  static absl::StatusOr<ProgressSocket> Bind(const std::string& path);
  ProgressSocket(ProgressSocket&&) = default;
  ProgressSocket& operator=(ProgressSocket&&) = default;
  ~ProgressSocket();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

  // Reads at most `max` waiting datagrams without blocking, calling `on` with the sender's pid
  // and the bytes; a datagram longer than the protocol allows is dropped. Returns how many were read.
  int Drain(int max, const std::function<void(pid_t, absl::string_view)>& on);
  int64_t dropped() const { return dropped_; }

 private:
  ProgressSocket(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
  int64_t dropped_ = 0;
};

}  // namespace dtrun::progress
