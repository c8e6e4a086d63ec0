// A regular file as a pipe, for a reader that waits on epoll (which refuses regular files): a
// thread of its own copies the file into the pipe, blocking only in read() and write(), so the
// pipe's reader sets the pace. Ends at the file's end (the pipe then reads EOF), or when this
// object goes (its read end closes and the thread's next write fails; SIGPIPE is blocked there).
#pragma once

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace dtrun {

class FileFeed {
 public:
  // Reads `file_fd` (not owned; it must outlive this) from its current offset.
  static absl::StatusOr<std::unique_ptr<FileFeed>> Start(int file_fd);
  ~FileFeed();
  FileFeed(const FileFeed&) = delete;
  FileFeed& operator=(const FileFeed&) = delete;

  int fd() const { return read_.get(); }  // the pipe's read end, non-blocking

 private:
  explicit FileFeed(UniqueFd read) : read_(std::move(read)) {}
  UniqueFd read_;
  std::thread thread_;
};

// Whether `fd` is a regular file (what FileFeed is for).
bool IsRegularFile(int fd);

}  // namespace dtrun
