// Move-only owner of a file descriptor; closes it on destruction.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace dtrun {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A pipe whose both ends are O_CLOEXEC; `nonblocking_read` also makes the read end O_NONBLOCK.
struct Pipe {
  UniqueFd read;
  UniqueFd write;
};
absl::StatusOr<Pipe> MakePipe(bool nonblocking_read);

// Writes all of `data` (retrying on EINTR/short writes). Returns false on error.
bool WriteAll(int fd, const char* data, size_t size);

}  // namespace dtrun
