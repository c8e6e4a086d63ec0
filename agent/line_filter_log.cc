#include "agent/line_filter_log.h"

#include <errno.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrun {

LineFilterLog::LineFilterLog(std::vector<std::string> filters, std::string prefix, std::shared_ptr<UniqueFd> file)
    : filters_(std::move(filters)), prefix_(std::move(prefix)), file_(std::move(file)) {}

void LineFilterLog::Write(absl::string_view data) {
  while (!data.empty()) {
    const size_t end = data.find('\n');
    const size_t take = std::min(end == absl::string_view::npos ? data.size() : end, kMaxLine - partial_.size());
    partial_.append(data.data(), take);
    data.remove_prefix(take);
    const bool line_ends = !data.empty() && data.front() == '\n';
    if (line_ends) data.remove_prefix(1);
    if (line_ends || partial_.size() == kMaxLine) {
      Judge(partial_);
      partial_.clear();
    }
  }
}

void LineFilterLog::Flush() {
  if (!partial_.empty()) Judge(partial_);
  partial_.clear();
}

void LineFilterLog::Judge(absl::string_view line) {
  if (!file_ || !file_->valid()) return;
  if (std::none_of(filters_.begin(), filters_.end(),
                   [&](const std::string& f) { return absl::StrContains(line, f); })) {
    return;
  }
  // One write per line, to a file opened with O_APPEND: lines of different ranks never interleave.
  const std::string out = absl::StrCat(prefix_, line, "\n");
  ssize_t n;
  do {
    n = ::write(file_->get(), out.data(), out.size());
  } while (n < 0 && errno == EINTR);
}

}  // namespace dtrun
