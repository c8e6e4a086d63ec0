#include "agent/output_relay.h"

#include <errno.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace dtrun {

OutputRelay::OutputRelay(std::string prefix, std::shared_ptr<Console> console, UniqueFd file)
    : prefix_(std::move(prefix)), console_(std::move(console)), file_(std::move(file)) {}

void OutputRelay::Write(absl::string_view data, Clock::time_point now) {
  if (file_.valid()) WriteAll(file_.get(), data.data(), data.size());
  if (tail_limit_ > 0) KeepInTail(data);
  if (filtered_) filtered_->Write(data);
  if (!console_ || data.empty()) return;
  last_data_ = now;
  while (!data.empty()) {
    size_t cut = data.find('\n');  // memchr, then '\r' only within the line
    size_t cr = data.substr(0, cut).find('\r');
    if (cr != absl::string_view::npos) cut = cr;
    if (cut == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() >= kMaxLine) {
        Emit(partial_, Console::End::kOpen);
        partial_.clear();
      }
      break;
    }
    const bool newline = data[cut] == '\n';
    absl::string_view piece = data.substr(0, cut);
    if (partial_.empty()) {
      Emit(piece, newline ? Console::End::kNewline : Console::End::kCarriageReturn);
    } else {
      partial_.append(piece.data(), piece.size());
      Emit(partial_, newline ? Console::End::kNewline : Console::End::kCarriageReturn);
      partial_.clear();
    }
    partial_starts_line_ = newline;
    data.remove_prefix(cut + 1);
  }
  console_->Flush();
}

bool OutputRelay::DrainFrom(int fd, Clock::time_point now) {
  char buf[65536];
  for (size_t total = 0; total < kMaxReadPerCall;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      Write(absl::string_view(buf, static_cast<size_t>(n)), now);
      total += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    return false;  // EOF or error
  }
  return true;  // more may be ready: epoll (level-triggered) reports the fd again
}

void OutputRelay::KeepInTail(absl::string_view data) {
  tail_written_ += data.size();
  tail_.append(data.data(), data.size());
  if (tail_.size() > 2 * tail_limit_) tail_.erase(0, tail_.size() - tail_limit_);  // once per tail_limit_ bytes
}

absl::string_view OutputRelay::tail() const {
  absl::string_view kept = tail_;
  return kept.size() > tail_limit_ ? kept.substr(kept.size() - tail_limit_) : kept;
}

std::optional<OutputRelay::Clock::time_point> OutputRelay::quiet_deadline() const {
  if (partial_.empty() || congested()) return std::nullopt;
  return last_data_ + kQuietTime;
}

void OutputRelay::ReadingResumed(Clock::time_point now) {
  if (!partial_.empty()) last_data_ = now;
}

void OutputRelay::ShowIfQuiet(Clock::time_point now) {
  if (!quiet_deadline() || now < *quiet_deadline()) return;
  if (partial_starts_line_ && !line_shown_) prompted_ = true;
  Emit(partial_, Console::End::kOpen);
  partial_.clear();
  console_->Flush();
}

void OutputRelay::Flush() {
  if (filtered_) filtered_->Flush();
  if (!console_) return;
  if (!partial_.empty()) {
    Emit(partial_, Console::End::kNewline);
    partial_.clear();
  }
  console_->EndLineOf(this);
  console_->Flush();
  line_shown_ = false;
}

void OutputRelay::Emit(absl::string_view text, Console::End end) {
  console_->Write(this, prefix_, text, end);
  line_shown_ = end == Console::End::kOpen;
}

std::string ExpandPrefixTemplate(absl::string_view tmpl, absl::string_view role_name, int rank,
                                 int local_rank) {
  return absl::StrReplaceAll(tmpl, {{"${role_name}", role_name},
                                    {"${rank}", absl::StrCat(rank)},
                                    {"${local_rank}", absl::StrCat(local_rank)}});
}

}  // namespace dtrun
