// The --rdzv-token value in a command line: hidden from what `dtrun status` shows and from the
// process's own argv.
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// The command line as `dtrun status` may show it: the value of --rdzv-token is replaced by "***".
std::string RedactedCommandLine(const std::vector<std::string>& args);
// Overwrites the value of --rdzv-token in the process's own argv (so /proc/PID/cmdline and `ps`
// do not show it); returns true if there was one.
bool HideTokenInArgv(int argc, char** argv);

}  // namespace dtrun
