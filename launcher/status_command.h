// `dtrun status`: a live table of every worker of this user's jobs on this machine — or, for a
// multi-node job, of every node — from the agents' status rows (docs/DESIGN.md, "dtrun status").
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int StatusCommand(const std::vector<std::string>& args);

}  // namespace dtrun
