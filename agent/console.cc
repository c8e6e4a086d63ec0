#include "agent/console.h"

#include <sys/stat.h>
#include <unistd.h>

#include "base/unique_fd.h"

namespace dtrun {

void Console::Write(const void* writer, absl::string_view prefix, absl::string_view text, End end) {
  std::string& out = buffer_;
  if (owner_ != nullptr && owner_ != writer) {
    out += '\n';  // another rank's line stays whole on its own console line
    owner_ = nullptr;
  }
  const bool continues = owner_ == writer && !at_line_start_;
  if (!continues && text.empty() && end == End::kCarriageReturn) return;  // nothing to redraw
  if (!continues) out.append(prefix.data(), prefix.size());
  out.append(text.data(), text.size());
  switch (end) {
    case End::kNewline:
      out += '\n';
      owner_ = nullptr;
      break;
    case End::kCarriageReturn:
      out += '\r';
      owner_ = writer;
      at_line_start_ = true;
      break;
    case End::kOpen:
      owner_ = writer;
      at_line_start_ = false;
      break;
  }
}

void Console::Flush() {
  if (buffer_.empty()) return;
  WriteAll(fd_, buffer_.data(), buffer_.size());
  buffer_.clear();
}

void Console::EndLineOf(const void* writer) {
  if (owner_ != writer || writer == nullptr) return;
  owner_ = nullptr;
  buffer_ += '\n';
  Flush();
}

namespace {

bool SameFile(int a, int b) {
  struct stat sa, sb;
  if (::fstat(a, &sa) != 0 || ::fstat(b, &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

Consoles Consoles::ForStdio() {
  Consoles c;
  c.out = std::make_shared<Console>(STDOUT_FILENO);
  c.err = SameFile(STDOUT_FILENO, STDERR_FILENO) ? c.out : std::make_shared<Console>(STDERR_FILENO);
  return c;
}

void Consoles::ForgetOpenLines() {
  if (out) out->ForgetOpenLine();
  if (err) err->ForgetOpenLine();
}

}  // namespace dtrun
