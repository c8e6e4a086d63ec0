// Runs a parsed launch on this node: registry entry, launch guard, log paths, the agent.
#pragma once

#include <map>
#include <string>

#include "base/console_writer.h"
#include "launcher/launch_config.h"

namespace dtrun {

// Returns dtrun's exit code. Must be called before any thread that takes signals is started (the
// console writers take none).
int RunJob(LaunchConfig config, const std::map<std::string, std::string>& env,
           const std::string& command_line, const StdioWriters& stdio);

}  // namespace dtrun
