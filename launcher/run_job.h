// Runs a parsed launch on this node: registry entry, launch guard, log paths, the agent.
#pragma once

#include <map>
#include <string>

#include "launcher/launch_config.h"

namespace dtrun {

// Returns dtrun's exit code. Must be called while the process is single-threaded.
int RunJob(LaunchConfig config, const std::map<std::string, std::string>& env,
           const std::string& command_line);

}  // namespace dtrun
