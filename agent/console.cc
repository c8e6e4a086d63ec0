#include "agent/console.h"

namespace dtrun {

bool Console::LineOpen() {
  // A dtrun log line ended the open line on the console: whoever continues begins a new one.
  if (owner_ != nullptr && writer_->lines_ended_by_logs() != log_breaks_) owner_ = nullptr;
  return owner_ != nullptr;
}

void Console::NoteJoin(bool ends_line, absl::string_view prefix) {
  if (buffer_.empty()) join_ = ConsoleWriter::LineJoin{log_breaks_, ends_line, std::string(prefix)};
}

void Console::Write(const void* writer, absl::string_view prefix, absl::string_view text, End end) {
  std::string& out = buffer_;
  if (LineOpen() && owner_ != writer) {
    NoteJoin(/*ends_line=*/true, "");
    out += '\n';  // another rank's line stays whole on its own console line
    owner_ = nullptr;
  }
  const bool continues = owner_ == writer && !at_line_start_;
  if (!continues && text.empty() && end == End::kCarriageReturn) return;  // nothing to redraw
  if (continues) NoteJoin(/*ends_line=*/false, prefix);
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
      log_breaks_ = writer_->lines_ended_by_logs();
      break;
    case End::kOpen:
      owner_ = writer;
      at_line_start_ = false;
      log_breaks_ = writer_->lines_ended_by_logs();
      break;
  }
}

void Console::Flush() {
  if (buffer_.empty()) return;
  const uint64_t log_breaks = writer_->Write(buffer_, join_ ? &*join_ : nullptr);
  join_.reset();
  if (owner_ != nullptr) log_breaks_ = log_breaks;  // the open line is the end of these bytes
}

void Console::WriteBlock(absl::string_view text) {
  if (LineOpen()) {
    NoteJoin(/*ends_line=*/true, "");
    buffer_ += '\n';
  }
  owner_ = nullptr;
  buffer_.append(text.data(), text.size());
  Flush();
}

void Console::EndLineOf(const void* writer) {
  if (writer == nullptr || !LineOpen() || owner_ != writer) return;
  owner_ = nullptr;
  NoteJoin(/*ends_line=*/true, "");
  buffer_ += '\n';
  Flush();
}

Consoles Consoles::ForStdio(const StdioWriters& writers) {
  Consoles c;
  c.out = std::make_shared<Console>(writers.out);
  c.err = writers.err == writers.out ? c.out : std::make_shared<Console>(writers.err);
  return c;
}

void Consoles::ForgetOpenLines() {
  if (out) out->ForgetOpenLine();
  if (err) err->ForgetOpenLine();
}

}  // namespace dtrun
