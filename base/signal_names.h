// Signal name <-> number, accepting torchrun's spellings ("SIGTERM", "TERM", "15").
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

absl::StatusOr<int> ParseSignal(absl::string_view name);
// Parses a comma-separated list such as "SIGTERM,SIGINT".
absl::StatusOr<std::vector<int>> ParseSignalList(absl::string_view list);
// "SIGTERM" for 15; "SIG<n>" for numbers without a name.
std::string SignalName(int signo);

}  // namespace dtrun
