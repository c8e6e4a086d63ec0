#include "base/signal_names.h"

#include <signal.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun {
namespace {

struct NamedSignal {
  const char* name;
  int signo;
};
constexpr NamedSignal kSignals[] = {
    {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},     {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL},
    {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},   {"SIGBUS", SIGBUS},   {"SIGFPE", SIGFPE},
    {"SIGKILL", SIGKILL}, {"SIGUSR1", SIGUSR1},   {"SIGSEGV", SIGSEGV}, {"SIGUSR2", SIGUSR2},
    {"SIGPIPE", SIGPIPE}, {"SIGALRM", SIGALRM},   {"SIGTERM", SIGTERM}, {"SIGCHLD", SIGCHLD},
    {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},   {"SIGTSTP", SIGTSTP}, {"SIGXCPU", SIGXCPU},
    {"SIGXFSZ", SIGXFSZ}, {"SIGVTALRM", SIGVTALRM}, {"SIGPROF", SIGPROF}, {"SIGSYS", SIGSYS},
};

}  // namespace

absl::StatusOr<int> ParseSignal(absl::string_view name) {
  std::string upper = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(name));
  int number = 0;
  if (absl::SimpleAtoi(upper, &number) && number > 0 && number < NSIG) return number;
  if (!absl::StartsWith(upper, "SIG")) upper = absl::StrCat("SIG", upper);
  for (const NamedSignal& s : kSignals) {
    if (upper == s.name) return s.signo;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown signal '", name, "'; use a name such as SIGTERM or a number"));
}

absl::StatusOr<std::vector<int>> ParseSignalList(absl::string_view list) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    DT_ASSIGN_OR_RETURN(int signo, ParseSignal(part));
    out.push_back(signo);
  }
  return out;
}

std::string SignalName(int signo) {
  for (const NamedSignal& s : kSignals) {
    if (s.signo == signo) return s.name;
  }
  return absl::StrCat("SIG", signo);
}

}  // namespace dtrun
