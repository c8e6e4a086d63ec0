#include "agent/stderr_error.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dtrun {
namespace {

constexpr absl::string_view kTraceback = "Traceback (most recent call last):";
// rich's traceback handler (rich.traceback.install()) draws each traceback in a box whose top edge
// carries the title: "╭──── Traceback (most recent call last) ────╮", frames in "│" lines.
constexpr absl::string_view kBoxTopLeft = "\xe2\x95\xad";  // ╭
constexpr absl::string_view kBoxTitle = "Traceback (most recent call last)";
constexpr absl::string_view kFatal = "Fatal Python error: ";
constexpr absl::string_view kFatalCpp = "Fatal signal: ";      // the worker library's (worker/crash_report.h)
constexpr absl::string_view kTerminate = "terminate called ";  // "after throwing ...", "without an active exception"
constexpr absl::string_view kWhat = "  what():";
constexpr size_t kMaxMessageBytes = 1024;
constexpr int kLastLines = 10;
constexpr absl::string_view kLastLinesTitle = "(no error file and no Python traceback; the last lines of its stderr:)";
constexpr int kMaxWhatLines = 200;  // c10::Error's what() carries a C++ stack of ~30-100 frames
// What Python prints between the tracebacks of chained exceptions.
constexpr absl::string_view kChained[] = {
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
};

// `text` without its CSI escape sequences (colours: Python 3.13 colours tracebacks under FORCE_COLOR).
std::string WithoutEscapes(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\x1b' || i + 1 >= text.size() || text[i + 1] != '[') {
      out.push_back(text[i]);
      continue;
    }
    size_t j = i + 2;
    while (j < text.size() && text[j] >= 0x20 && text[j] <= 0x3f) ++j;  // parameters, intermediates
    if (j < text.size() && text[j] >= 0x40 && text[j] <= 0x7e) {
      i = j;  // a whole sequence, its final byte included: dropped
    } else {
      out.push_back(text[i]);  // not a sequence: kept as it is
    }
  }
  return out;
}

// PyTorch 2's excepthook (set by init_process_group) prefixes each line of a traceback with
// "[rankN]: ".
void RemoveRankPrefix(absl::string_view& line) {
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, "[rank")) return;
  const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
  rest.remove_prefix(digits);
  if (digits > 0 && absl::ConsumePrefix(&rest, "]: ")) line = rest;
}

// The lines as a terminal shows them (a '\r', a progress bar's redraw, keeps what follows it),
// without PyTorch's rank prefix.
std::vector<absl::string_view> ShownLines(absl::string_view tail, bool cut) {
  std::vector<absl::string_view> lines = absl::StrSplit(tail, '\n');
  if (cut && !lines.empty()) lines.erase(lines.begin());  // begins mid-line
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (absl::string_view& line : lines) {
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t cr = line.rfind('\r');
    if (cr != absl::string_view::npos) line.remove_prefix(cr + 1);
    RemoveRankPrefix(line);
  }
  return lines;
}

int LastLineStartingWith(const std::vector<absl::string_view>& lines, absl::string_view start, int before) {
  for (int i = before - 1; i >= 0; --i) {
    if (absl::StartsWith(lines[i], start)) return i;
  }
  return -1;
}

// faulthandler's report of a fatal signal, or the C++ worker library's.
int LastFatalReport(const std::vector<absl::string_view>& lines, int before) {
  for (int i = before - 1; i >= 0; --i) {
    if (absl::StartsWith(lines[i], kFatal) || absl::StartsWith(lines[i], kFatalCpp)) return i;
  }
  return -1;
}

bool IsTracebackStart(absl::string_view line) {
  return absl::StartsWith(line, kTraceback) ||
         (absl::StartsWith(line, kBoxTopLeft) && absl::StrContains(line, kBoxTitle));
}

int LastTracebackStart(const std::vector<absl::string_view>& lines, int before) {
  for (int i = before - 1; i >= 0; --i) {
    if (IsTracebackStart(lines[i])) return i;
  }
  return -1;
}

// A line of a box drawn around a traceback (U+2500..U+257F: "│", "╰", ...). No exception's line
// starts with one: a type's name is an identifier.
bool IsBoxLine(absl::string_view line) {
  return absl::StartsWith(line, "\xe2\x94") || absl::StartsWith(line, "\xe2\x95");
}

// The first traceback of the chain that ends with the one at `last`.
int ChainStart(const std::vector<absl::string_view>& lines, int last) {
  int start = last;
  for (;;) {
    int i = start - 1;
    while (i >= 0 && lines[i].empty()) --i;
    const bool chained = i >= 0 && (lines[i] == kChained[0] || lines[i] == kChained[1]);
    const int earlier = chained ? LastTracebackStart(lines, i) : -1;
    if (earlier < 0) return start;
    start = earlier;
  }
}

// The exception's line: the first unindented line after the traceback's frames (and after its
// box, for rich's); -1 when the worker died while printing them.
int ExceptionLine(const std::vector<absl::string_view>& lines, int traceback) {
  for (size_t i = static_cast<size_t>(traceback) + 1; i < lines.size(); ++i) {
    if (!lines[i].empty() && lines[i][0] != ' ' && !IsBoxLine(lines[i])) return static_cast<int>(i);
  }
  return -1;
}

std::string Capped(absl::string_view line) {
  return line.size() <= kMaxMessageBytes ? std::string(line) : absl::StrCat(line.substr(0, kMaxMessageBytes), "...");
}

std::string Joined(const std::vector<absl::string_view>& lines, int from) {
  std::string text = absl::StrJoin(lines.begin() + from, lines.end(), "\n");
  if (text.size() <= kMaxStderrErrorBytes) return text;
  return absl::StrCat("[... ", text.size() - kMaxStderrErrorBytes, " bytes cut]\n",
                      absl::string_view(text).substr(text.size() - kMaxStderrErrorBytes));
}

// libstdc++'s report of an uncaught C++ exception: "terminate called after throwing an instance
// of 'T'" and, on the next line, "  what():  TEXT" (c10's TEXT goes on with a C++ stack). The
// message is "T: TEXT"; the report alone when there is no what().
std::string CppExceptionMessage(const std::vector<absl::string_view>& lines, int terminate) {
  absl::string_view type = lines[terminate];
  const size_t quote = type.find('\'');
  type = quote == absl::string_view::npos ? absl::string_view() : type.substr(quote + 1);
  type = type.substr(0, type.find('\''));
  const size_t next = static_cast<size_t>(terminate) + 1;
  absl::string_view what = next < lines.size() ? lines[next] : absl::string_view();
  if (type.empty() || !absl::ConsumePrefix(&what, kWhat)) return Capped(lines[terminate]);
  return Capped(absl::StrCat(type, ": ", absl::StripLeadingAsciiWhitespace(what)));
}

// A process aborted by a signal: Python's faulthandler report (dtrun sets PYTHONFAULTHANDLER),
// from the C++ exception that aborted it when there was one (its what() names the error, where the
// report only says "Aborted"); else that C++ exception's report alone (a C++ program, or Python
// without faulthandler), if it is among the last lines.
std::optional<StderrError> AbortReport(const std::vector<absl::string_view>& lines, int fatal) {
  const int n = static_cast<int>(lines.size());
  const int end = fatal >= 0 ? fatal : n;
  const int terminate = LastLineStartingWith(lines, kTerminate, end);
  const bool cpp = terminate >= 0 && end - terminate <= kMaxWhatLines;
  if (fatal < 0 && !cpp) return std::nullopt;
  return StderrError{cpp ? CppExceptionMessage(lines, terminate) : Capped(lines[fatal]),
                     Joined(lines, cpp ? terminate : fatal)};
}

// No traceback: a program that says its error in a line (a C++ trainer's "train_imagenet: ...", a
// shell script's), or a script that logged it and exited: the end of its stderr, said to be that.
std::optional<StderrError> LastLines(const std::vector<absl::string_view>& lines) {
  int end = static_cast<int>(lines.size());
  while (end > 0 && lines[end - 1].find_first_not_of(" \t") == absl::string_view::npos) --end;
  if (end == 0) return std::nullopt;
  const int from = std::max(0, end - kLastLines);
  std::vector<absl::string_view> shown(lines.begin() + from, lines.begin() + end);
  shown.insert(shown.begin(), kLastLinesTitle);
  return StderrError{"", Joined(shown, 0)};  // no message: the last line need not be the error
}

}  // namespace

std::optional<StderrError> FindErrorInStderr(absl::string_view raw, bool cut, bool by_signal) {
  const std::string tail = WithoutEscapes(raw);
  const std::vector<absl::string_view> lines = ShownLines(tail, cut);
  const int n = static_cast<int>(lines.size());
  const int fatal = LastFatalReport(lines, n);
  const int last = LastTracebackStart(lines, n);
  if (by_signal) return AbortReport(lines, fatal);
  // A fatal report after the last traceback is the worker's end; one before it was a child's (a
  // DataLoader worker's segfault, which the worker then raised as an exception).
  if (fatal > last) return AbortReport(lines, fatal);
  const int exception = last >= 0 ? ExceptionLine(lines, last) : -1;
  if (last >= 0 && (exception < 0 || n - 1 - exception <= kMaxLinesAfterTheError)) {
    return StderrError{exception >= 0 ? Capped(lines[exception]) : std::string(),
                       Joined(lines, ChainStart(lines, last))};
  }
  return LastLines(lines);
}

}  // namespace dtrun
