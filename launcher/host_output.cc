#include "launcher/host_output.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dtrun {

HostOutput::HostOutput(std::vector<std::string> host_names, Consoles consoles)
    : names_(std::move(host_names)), consoles_(std::move(consoles)) {}

void HostOutput::Write(int host, bool is_stderr, absl::string_view data, Clock::time_point now) {
  const Key key{host, is_stderr};
  Stream& s = streams_[key];
  s.last_data = now;
  if (s.line_open) {  // the rest of a line whose start is on the console
    size_t nl = data.find('\n');
    Show(key, s, data.substr(0, nl), nl == absl::string_view::npos ? Console::End::kOpen : Console::End::kNewline);
    if (nl == absl::string_view::npos) return;
    data.remove_prefix(nl + 1);
  }
  s.partial.append(data.data(), data.size());
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    ShowLine(key, s, s.partial.substr(start, nl + 1 - start));
  }
  s.partial.erase(0, start);
  if (s.partial.size() >= kMaxLine) {
    Show(key, s, Relabel(host, std::exchange(s.partial, "")), Console::End::kOpen);
  }
}

void HostOutput::End(int host, bool is_stderr) {
  const Key key{host, is_stderr};
  auto it = streams_.find(key);
  if (it == streams_.end()) return;
  Stream& s = it->second;
  if (!s.partial.empty()) ShowLine(key, s, std::exchange(s.partial, "") + "\n");  // a last line is a line
  if (is_stderr) {
    for (const std::string& held : summaries_.Flush(host)) Show(key, s, held, Console::End::kOpen);
  }
  ConsoleOf(key).EndLineOf(&s);
  s.line_open = false;
}

std::optional<HostOutput::Clock::time_point> HostOutput::quiet_deadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, s] : streams_) {
    if (s.partial.empty()) continue;
    const Clock::time_point due = s.last_data + kQuietTime;
    if (!next || due < *next) next = due;
  }
  return next;
}

std::vector<int> HostOutput::ShowQuiet(Clock::time_point now) {
  std::vector<int> prompted;
  for (auto& [key, s] : streams_) {
    // A summary being collected on that stream comes first; the rest of it is on its way.
    if (s.partial.empty() || now < s.last_data + kQuietTime || (key.second && summaries_.holding(key.first))) continue;
    // A prompt starts a line and waits; a progress bar redraws its line with '\r'.
    const bool prompt = s.partial.find('\r') == std::string::npos;
    Show(key, s, Relabel(key.first, std::exchange(s.partial, "")), Console::End::kOpen);
    if (prompt) prompted.push_back(key.first);
  }
  return prompted;
}

void HostOutput::ReadingResumed(Clock::time_point now) {
  for (auto& [key, s] : streams_) {
    if (!s.partial.empty()) s.last_data = now;
  }
}

void HostOutput::ForgetOpenLines() {
  consoles_.ForgetOpenLines();
  for (auto& [key, s] : streams_) s.line_open = false;
}

void HostOutput::ShowLine(const Key& key, Stream& s, std::string line) {
  line = Relabel(key.first, std::move(line));
  if (!key.second) {
    Show(key, s, line, Console::End::kOpen);
    return;
  }
  for (const std::string& shown : summaries_.Feed(key.first, std::move(line))) Show(key, s, shown, Console::End::kOpen);
}

// `text` ends with its own newline unless `end` says otherwise: a whole line leaves no line open.
void HostOutput::Show(const Key& key, Stream& s, absl::string_view text, Console::End end) {
  Console& console = ConsoleOf(key);
  if (end == Console::End::kOpen && absl::EndsWith(text, "\n")) {
    text.remove_suffix(1);
    end = Console::End::kNewline;
  }
  console.Write(&s, "", text, end);
  console.Flush();
  s.line_open = end == Console::End::kOpen;
}

std::string HostOutput::Relabel(int host, std::string line) const {
  if (!absl::StartsWith(line, "[dtrun] ") || host < 0 || static_cast<size_t>(host) >= names_.size()) return line;
  return absl::StrCat("[dtrun ", names_[static_cast<size_t>(host)], "] ", line.substr(8));
}

}  // namespace dtrun
