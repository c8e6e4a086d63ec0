// Runs a parsed launch on this node: registry entry, launch guard, log paths, the agent.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "base/console_writer.h"
#include "launcher/launch_config.h"

namespace dtrun {

// Returns the job's exit code (the agent's, or 128 + a signal that ended the launch), or why the
// launch could not run, for the caller to report once (base/exit_codes.h gives its code). Must be called
// before any thread that takes signals is started (the console writers take none).
absl::StatusOr<int> RunJob(LaunchConfig config, const std::map<std::string, std::string>& env,
                           const std::string& command_line, const StdioWriters& stdio);

}  // namespace dtrun
