// `dtrun kill`: find the processes dtrun launched on this machine (by the launch marker in their
// environment, never by name) and end them, or end a multi-node job through its rendezvous.
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int KillCommand(const std::vector<std::string>& args);

}  // namespace dtrun
