// `dtrun kill` and `dtrun status`: find the processes dtrun launched on this machine (by the
// launch marker in their environment, never by name) and list or end them.
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// Both return the process exit code. `args` excludes the subcommand name.
int KillCommand(const std::vector<std::string>& args);
int StatusCommand(const std::vector<std::string>& args);

}  // namespace dtrun
