#include "progress/report_protocol.h"

#include <signal.h>

#include <algorithm>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun::progress {
namespace {

absl::Status Bad(absl::string_view why) { return absl::InvalidArgumentError(why); }

bool ValidLang(absl::string_view s) {
  if (s.empty() || s.size() > 16) return false;
  for (char c : s) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) && !absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return true;
}

// A count: decimal, 0 .. 2^62 (room for rates and sums without overflow).
std::optional<int64_t> Count(absl::string_view s) {
  int64_t v = 0;
  if (s.empty() || s.size() > 19 || !absl::SimpleAtoi(s, &v) || v < 0 || v > (int64_t{1} << 62)) return std::nullopt;
  if (!absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;  // no sign, no space
  return v;
}

std::optional<Report::Kind> KindOf(absl::string_view word) {
  if (word == "hello") return Report::Kind::kHello;
  if (word == "beat") return Report::Kind::kBeat;
  if (word == "begin") return Report::Kind::kBegin;
  if (word == "end") return Report::Kind::kEnd;
  if (word == "total") return Report::Kind::kTotal;
  if (word == "snapshot") return Report::Kind::kSnapshot;
  if (word == "restored") return Report::Kind::kRestored;
  if (word == "sync") return Report::Kind::kSync;
  if (word == "diverged") return Report::Kind::kDiverged;
  if (word == "keeping") return Report::Kind::kKeeping;
  if (word == "kept") return Report::Kind::kKept;
  if (word == "not_kept") return Report::Kind::kNotKept;
  return std::nullopt;
}

absl::Status ApplyField(absl::string_view key, absl::string_view value, Report& r) {
  auto count = [&](std::optional<int64_t>& out) -> absl::Status {
    out = Count(value);
    return out ? absl::OkStatus() : Bad(absl::StrCat(key, ": expected a count 0..2^62"));
  };
  if (key == "step") return count(r.step);
  if (key == "samples") return count(r.samples);
  if (key == "steps") return count(r.total_steps);
  if (key == "bytes") return count(r.bytes);
  if (key == "us") return count(r.micros);
  if (key == "wait_us") return count(r.wait_micros);
  if (key == "step_us") return count(r.step_micros);
  if (key == "fingerprint" || key == "majority") {
    const bool hex = value.size() == 16 && std::all_of(value.begin(), value.end(), [](char c) {
      return absl::ascii_isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
    });
    if (!hex && !(key == "majority" && value == "none")) return Bad(absl::StrCat(key, ": expected 16 hex digits"));
    (key == "fingerprint" ? r.fingerprint : r.majority) = std::string(value);
    return absl::OkStatus();
  }
  if (key == "source") {
    if (value != "memory" && value != "buddy" && value != "peer" && value != "disk" && value != "none") {
      return Bad("source: expected memory, buddy, peer, disk or none");
    }
    r.source = std::string(value);
    return absl::OkStatus();
  }
  if (key == "name") {
    if (!IsValidSectionName(value)) return Bad("name: expected 1-64 of [A-Za-z0-9_.:-]");
    r.name = std::string(value);
    return absl::OkStatus();
  }
  if (key == "lang") {
    if (!ValidLang(value)) return Bad("lang: expected 1-16 of [a-z0-9]");
    r.lang = std::string(value);
    return absl::OkStatus();
  }
  if (key == "warm") {
    if (value != "0" && value != "1") return Bad("warm: expected 0 or 1");
    r.warm = value == "1";
    return absl::OkStatus();
  }
  if (key == "stack_signal") {
    std::optional<int64_t> sig = Count(value);
    // Only signals whose default use is the application's: a worker cannot talk the agent into
    // sending itself (or its group) SIGKILL or SIGTERM.
    const bool allowed = sig && (*sig == SIGUSR1 || *sig == SIGUSR2 || (*sig >= SIGRTMIN && *sig <= SIGRTMAX));
    if (!allowed) return Bad("stack_signal: expected SIGUSR1, SIGUSR2 or a real-time signal");
    r.stack_signal = static_cast<int>(*sig);
    return absl::OkStatus();
  }
  return absl::OkStatus();  // a newer client's field
}

}  // namespace

bool IsValidSectionName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != ':' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Report> ParseReport(absl::string_view datagram) {
  if (datagram.size() > kMaxReportBytes) return Bad("longer than 512 bytes");
  if (!datagram.empty() && datagram.back() == '\n') datagram.remove_suffix(1);
  for (char c : datagram) {
    if (c < 0x20 || c > 0x7e) return Bad("not one line of printable ASCII");
  }
  std::vector<absl::string_view> words = absl::StrSplit(datagram, ' ', absl::SkipEmpty());
  if (words.empty()) return Bad("empty");
  std::optional<Report::Kind> kind = KindOf(words[0]);
  if (!kind)
    return Bad(
        "unknown kind (expected hello, beat, begin, end, total, snapshot, restored, sync, diverged, keeping, kept or "
        "not_kept)");
  Report r;
  r.kind = *kind;
  for (size_t i = 1; i < words.size(); ++i) {
    size_t eq = words[i].find('=');
    if (eq == absl::string_view::npos || eq == 0) return Bad("a field is not key=value");
    DT_RETURN_IF_ERROR(ApplyField(words[i].substr(0, eq), words[i].substr(eq + 1), r));
  }
  if ((r.kind == Report::Kind::kBegin || r.kind == Report::Kind::kEnd) && r.name.empty()) {
    return Bad("begin/end need name=");
  }
  if (r.kind == Report::Kind::kTotal && !r.total_steps) return Bad("total needs steps=");
  if (r.kind == Report::Kind::kSnapshot && !r.step) return Bad("snapshot needs step=");
  if (r.kind == Report::Kind::kKeeping && !r.step) return Bad("keeping needs step=");
  if (r.kind == Report::Kind::kKept && !r.step) return Bad("kept needs step=");
  if (r.kind == Report::Kind::kNotKept && !r.step) return Bad("not_kept needs step=");
  if (r.kind == Report::Kind::kRestored && r.source.empty()) return Bad("restored needs source=");
  if (r.kind == Report::Kind::kSync && (!r.step || !r.wait_micros || !r.step_micros)) {
    return Bad("sync needs step=, wait_us= and step_us=");
  }
  if (r.kind == Report::Kind::kDiverged && (!r.step || r.fingerprint.empty() || r.majority.empty())) {
    return Bad("diverged needs step=, fingerprint= and majority=");
  }
  return r;
}

std::string FormatReport(const Report& r) {
  switch (r.kind) {
    case Report::Kind::kHello:
      return absl::StrCat("hello lang=", r.lang.empty() ? "cpp" : r.lang,
                          r.stack_signal ? absl::StrCat(" stack_signal=", r.stack_signal) : "",
                          r.warm ? " warm=1" : "");
    case Report::Kind::kBeat: {
      std::string s = "beat";
      if (r.step) absl::StrAppend(&s, " step=", *r.step);
      if (r.samples) absl::StrAppend(&s, " samples=", *r.samples);
      return s;
    }
    case Report::Kind::kBegin:
      return absl::StrCat("begin name=", r.name);
    case Report::Kind::kEnd:
      return absl::StrCat("end name=", r.name);
    case Report::Kind::kTotal:
      return absl::StrCat("total steps=", r.total_steps.value_or(0));
    case Report::Kind::kSnapshot:
      return absl::StrCat("snapshot step=", r.step.value_or(0), " bytes=", r.bytes.value_or(0), " us=",
                          r.micros.value_or(0));
    case Report::Kind::kRestored:
      return absl::StrCat("restored source=", r.source.empty() ? "none" : r.source,
                          r.step ? absl::StrCat(" step=", *r.step) : "");
    case Report::Kind::kSync:
      return absl::StrCat("sync step=", r.step.value_or(0), " wait_us=", r.wait_micros.value_or(0), " step_us=",
                          r.step_micros.value_or(0));
    case Report::Kind::kDiverged:
      return absl::StrCat("diverged step=", r.step.value_or(0), " fingerprint=", r.fingerprint, " majority=", r.majority);
    case Report::Kind::kKeeping:
      return absl::StrCat("keeping step=", r.step.value_or(0), r.bytes ? absl::StrCat(" bytes=", *r.bytes) : "");
    case Report::Kind::kKept:
      return absl::StrCat("kept step=", r.step.value_or(0));
    case Report::Kind::kNotKept:
      return absl::StrCat("not_kept step=", r.step.value_or(0));
  }
  return "";
}

}  // namespace dtrun::progress
