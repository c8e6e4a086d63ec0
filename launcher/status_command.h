// `dtrun status`: a live table of every worker of this user's jobs on this machine — or, for a
// multi-node job, of every node — from the agents' status rows (docs/DESIGN.md, "dtrun status").
#pragma once

#include <string>
#include <vector>

#include "launcher/cli_option.h"

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int StatusCommand(const std::vector<std::string>& args);

// The flags of `dtrun status`, for shell completion.
std::vector<CliOption> StatusCommandFlags();

}  // namespace dtrun
