// Slurm's hostlist grammar (SLURM_JOB_NODELIST, `scontrol show hostnames`): comma-separated
// host expressions, each a name with bracketed ranges anywhere in it — `gpu[01-04,07]`,
// `a[1-2]-b[3-4]` (every combination, the leftmost bracket varying slowest), zero padding taken
// from the range's first number (`[08-10]` → 08 09 10).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dtrun {

// The hosts in order, duplicates kept. InvalidArgument names the position and the fault
// (unbalanced bracket, a bad range, more than `max_hosts` hosts).
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view list, size_t max_hosts = 1 << 16);

}  // namespace dtrun
