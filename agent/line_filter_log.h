// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: the lines of a worker's
// stream that contain any of the filter strings, with the worker's line prefix, copied into one
// file the workers of an attempt share (OUTPUT/attempt_N/filtered_stdout.log, filtered_stderr.log),
// so that "loss" or "ERROR" lines of every rank can be read in one place while training runs.
// One per relayed stream; not thread-safe (the agent's event loop drives it, as it does the relay).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace dtrun {

class LineFilterLog {
 public:
  // `file`: opened for appending, shared with the other streams of the attempt.
  LineFilterLog(std::vector<std::string> filters, std::string prefix, std::shared_ptr<UniqueFd> file);

  // Bytes as the worker wrote them: lines may arrive in pieces.
  void Write(absl::string_view data);
  // The stream ended: a last line without '\n' is a line too.
  void Flush();

  // Longer lines are judged in pieces of this size, so a worker cannot make dtrun hold more.
  static constexpr size_t kMaxLine = 64 * 1024;

 private:
  void Judge(absl::string_view line);

  std::vector<std::string> filters_;
  std::string prefix_;
  std::shared_ptr<UniqueFd> file_;
  std::string partial_;
};

}  // namespace dtrun
