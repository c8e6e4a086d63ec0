#include "agent/failure_report.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/exit_codes.h"
#include "base/signal_names.h"
#include "nlohmann/json.hpp"

namespace dtrun {
namespace {

constexpr char kRule[] = "============================================================";
constexpr char kThinRule[] = "------------------------------------------------------------";

std::string FormatOne(size_t index, const WorkerFailure& f) {
  std::string when = absl::FormatTime("%Y-%m-%d_%H:%M:%S", absl::FromUnixMillis(f.time_unix_ms),
                                      absl::LocalTimeZone());
  std::string exitcode = f.signal > 0 ? absl::StrCat(-f.signal) : absl::StrCat(f.exit_code);
  std::string traceback;
  if (!f.traceback.empty() || !f.message.empty()) {
    traceback = f.traceback.empty() ? f.message : f.traceback;
  } else if (f.signal == 0 && f.exit_code == kCollectiveTimeoutExitCode) {
    traceback = "a collective timed out: the worker hung (peer lost or stuck) and its watchdog ended it";
  } else if (f.signal > 0) {
    traceback = absl::StrCat("Signal ", f.signal, " (", SignalName(f.signal), ") received by PID ", f.pid);
  } else {
    traceback = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
  }
  return absl::StrCat("[", index, "]:\n",
                      "  time      : ", when, "\n",
                      "  host      : ", f.host, "\n",
                      "  rank      : ", f.global_rank, " (local_rank: ", f.local_rank, ")\n",
                      "  exitcode  : ", exitcode, " (pid: ", f.pid, ")\n",
                      "  error_file: ", f.message.empty() && f.traceback.empty() ? "<N/A>" : f.error_file, "\n",
                      "  traceback : ", traceback, "\n");
}

}  // namespace

std::vector<WorkerFailure> RootCauseFirst(std::vector<WorkerFailure> failures) {
  if (!failures.empty()) std::swap(failures[0], failures[RootCauseIndex(failures)]);
  return failures;
}

void ReadErrorFile(WorkerFailure& f) {
  if (f.error_file.empty()) return;
  std::ifstream in(f.error_file);
  if (!in) return;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("message")) return;
  const nlohmann::json& msg = doc["message"];
  if (msg.is_string()) {
    f.message = msg.get<std::string>();
    return;
  }
  if (!msg.is_object()) return;
  f.message = msg.value("message", "");
  if (msg.contains("extraInfo") && msg["extraInfo"].is_object()) {
    const nlohmann::json& extra = msg["extraInfo"];
    f.traceback = extra.value("py_callstack", "");
    std::string ts = extra.value("timestamp", "");
    f.error_timestamp = std::atof(ts.c_str());
  }
}

size_t RootCauseIndex(const std::vector<WorkerFailure>& failures) {
  size_t best = 0;
  for (size_t i = 1; i < failures.size(); ++i) {
    double t = failures[i].error_timestamp, b = failures[best].error_timestamp;
    if (t > 0 && (b == 0 || t < b)) best = i;
  }
  return best;
}

std::string LocalHostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
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
