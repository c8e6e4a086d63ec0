#include "agent/output_relay.h"

#include <errno.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace dtrun {

OutputRelay::OutputRelay(std::string prefix, int console_fd, UniqueFd file)
    : prefix_(std::move(prefix)), console_fd_(console_fd), file_(std::move(file)) {}

void OutputRelay::Write(absl::string_view data) {
  if (file_.valid()) WriteAll(file_.get(), data.data(), data.size());
  if (console_fd_ < 0) return;
  while (!data.empty()) {
    size_t nl = data.find('\n');
    if (nl == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() >= kMaxLine) Flush();
      return;
    }
    if (partial_.empty()) {
      EmitLine(data.substr(0, nl));
    } else {
      partial_.append(data.data(), nl);
      EmitLine(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

bool OutputRelay::DrainFrom(int fd) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      Write(absl::string_view(buf, static_cast<size_t>(n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;  // EOF or error
  }
}

void OutputRelay::Flush() {
  if (partial_.empty()) return;
  EmitLine(partial_);
  partial_.clear();
}

void OutputRelay::EmitLine(absl::string_view line) {
  std::string out = absl::StrCat(prefix_, line, "\n");
  WriteAll(console_fd_, out.data(), out.size());
}

std::string ExpandPrefixTemplate(absl::string_view tmpl, absl::string_view role_name, int rank,
                                 int local_rank) {
  return absl::StrReplaceAll(tmpl, {{"${role_name}", role_name},
                                    {"${rank}", absl::StrCat(rank)},
                                    {"${local_rank}", absl::StrCat(local_rank)}});
}

}  // namespace dtrun
