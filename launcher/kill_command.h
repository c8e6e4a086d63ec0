// `dtrun kill`: find the processes dtrun launched on this machine (by the launch marker in their
// environment, never by name) and end them, or end a multi-node job through its rendezvous.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli_option.h"

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int KillCommand(const std::vector<std::string>& args);

// The flags of `dtrun kill`, for shell completion.
std::vector<CliOption> KillCommandFlags();

}  // namespace dtrun
