#include "agent/failure_report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/exit_codes.h"
#include "base/signal_names.h"
#include "base/untrusted_file.h"
#include "nlohmann/json.hpp"

namespace dtrun {
namespace {

constexpr char kRule[] = "============================================================";
constexpr char kThinRule[] = "------------------------------------------------------------";

// What the summary shows as the failure's traceback.
std::string TracebackOf(const WorkerFailure& f) {
  const std::string text = f.traceback.empty() ? f.message : f.traceback;
  // dtrun's own exit code is explained before a text that is not from an error file (there is
  // none, or it is the end of the worker's stderr).
  const bool from_error_file = !f.error_file.empty() && !text.empty();
  if (f.signal == 0 && f.exit_code == kCollectiveTimeoutExitCode && !from_error_file) {
    return absl::StrCat("a collective timed out: the worker hung (peer lost or stuck) and its watchdog ended it",
                        text.empty() ? "" : "\n", text);
  }
  if (!text.empty()) return text;
  if (f.signal > 0) return absl::StrCat("Signal ", f.signal, " (", SignalName(f.signal), ") received by PID ", f.pid);
  return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
}

std::string FormatOne(size_t index, const WorkerFailure& f) {
  std::string when = absl::FormatTime("%Y-%m-%d_%H:%M:%S", absl::FromUnixMillis(f.time_unix_ms),
                                      absl::LocalTimeZone());
  std::string exitcode = f.signal > 0 ? absl::StrCat(-f.signal) : absl::StrCat(f.exit_code);
  const std::string traceback = TracebackOf(f);
  return absl::StrCat("[", index, "]:\n",
                      "  time      : ", when, "\n",
                      "  host      : ", f.host, "\n",
                      "  rank      : ", f.global_rank, " (local_rank: ", f.local_rank, ")\n",
                      "  exitcode  : ", exitcode, " (pid: ", f.pid, ")\n",
                      "  error_file: ", f.error_file.empty() || (f.message.empty() && f.traceback.empty()) ? "<N/A>" : f.error_file, "\n",
                      "  traceback : ", traceback, "\n");
}

}  // namespace

std::vector<WorkerFailure> RootCauseFirst(std::vector<WorkerFailure> failures) {
  if (!failures.empty()) std::swap(failures[0], failures[RootCauseIndex(failures)]);
  return failures;
}

namespace {

std::string Capped(std::string text, const std::string& path) {
  if (text.size() <= kMaxErrorTextBytes) return text;
  const size_t total = text.size();
  text.resize(kMaxErrorTextBytes);
  absl::StrAppend(&text, "\n... [", total - kMaxErrorTextBytes, " more bytes in ", path, "]");
  return text;
}

std::string StringField(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// torchelastic writes the time as a string of seconds; a number is accepted too.
double TimestampField(const nlohmann::json& obj) {
  auto it = obj.find("timestamp");
  if (it == obj.end()) return 0;
  double t = 0;
  if (it->is_number()) t = it->get<double>();
  if (it->is_string() && !absl::SimpleAtod(it->get<std::string>(), &t)) t = 0;
  return std::isfinite(t) && t > 0 ? t : 0;
}

// The record's whole seconds made finer by the file's modification time, when that falls in the
// same second: ranks that failed within one second are then ordered (the rank that raised, then
// its peers whose collectives failed on the closed connection), as torchrun, which ties them,
// does not.
void RefineTimestamp(WorkerFailure& f) {
  struct stat st {};
  if (f.error_timestamp <= 0 || ::lstat(f.error_file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
  if (std::floor(mtime) == std::floor(f.error_timestamp)) f.error_timestamp = mtime;
}

// When a failure happened, in seconds: its error record's time, else when the agent saw the worker
// end (torchrun's rule too); infinity where neither is known.
double FailureTime(const WorkerFailure& f) {
  if (f.error_timestamp > 0) return f.error_timestamp;
  if (f.time_unix_ms > 0) return f.time_unix_ms / 1000.0;
  return std::numeric_limits<double>::infinity();
}

}  // namespace

void ParseErrorRecord(absl::string_view json, WorkerFailure& f) {
  nlohmann::json doc = nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return;
  auto msg = doc.find("message");
  if (msg == doc.end()) return;
  if (msg->is_string()) {
    f.message = Capped(msg->get<std::string>(), f.error_file);
    return;
  }
  if (!msg->is_object()) return;
  f.message = Capped(StringField(*msg, "message"), f.error_file);
  auto extra = msg->find("extraInfo");
  if (extra != msg->end() && extra->is_object()) {
    f.traceback = Capped(StringField(*extra, "py_callstack"), f.error_file);
    f.error_timestamp = TimestampField(*extra);
  }
}

void ReadErrorFile(WorkerFailure& f) {
  if (f.error_file.empty()) return;
  absl::StatusOr<std::string> json = ReadUntrustedFile(f.error_file, kMaxErrorFileBytes);
  if (json.ok()) {
    ParseErrorRecord(*json, f);
    RefineTimestamp(f);
  } else if (absl::IsOutOfRange(json.status())) {
    f.message = absl::StrCat("(the worker's error file ", json.status().message(), ")");
  }
}

std::string LauncherErrorRecord(const std::vector<WorkerFailure>& failures) {
  const WorkerFailure& root = failures[RootCauseIndex(failures)];
  std::string message = root.message;
  if (message.empty()) {
    message = absl::StrCat("rank ", root.global_rank, " on ", root.host, " ",
                           root.signal > 0 ? absl::StrCat("was killed by signal ", root.signal)
                                           : absl::StrCat("exited with code ", root.exit_code),
                           root.kind == rdzv::FailureKind::kExited
                               ? ""
                               : absl::StrCat(" (", rdzv::FailureKindName(root.kind), ")"));
  }
  const double when = FailureTime(root);
  const double ts = std::isfinite(when) ? when : 0;
  nlohmann::json record = {{"message",
                            {{"message", message},
                             {"extraInfo", {{"py_callstack", root.traceback}, {"timestamp", absl::StrCat(static_cast<int64_t>(ts))}}},
                             {"errorCode", ExitCodeOf(root)}}}};
  return record.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

size_t RootCauseIndex(const std::vector<WorkerFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    if (FailureTime(failures[i]) < FailureTime(failures[best])) best = i;
  }
  return best;
}

std::string FormatFailureSummary(const std::string& program, const std::vector<WorkerFailure>& failures) {
  size_t root = RootCauseIndex(failures);
  std::string others;
  size_t n = 1;
  for (size_t i = 0; i < failures.size(); ++i) {
    if (i != root) absl::StrAppend(&others, FormatOne(n++, failures[i]));
  }
  if (others.empty()) others = "  <NO_OTHER_FAILURES>\n";
  return absl::StrCat(kRule, "\n", program, " FAILED\n", kThinRule, "\nFailures:\n", others,
                                 kThinRule, "\nRoot Cause (first observed failure):\n",
                                 FormatOne(0, failures[root]), kRule, "\n");
}

}  // namespace dtrun
