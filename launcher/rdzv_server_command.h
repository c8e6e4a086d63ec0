// `dtrun rdzv-server`: the rendezvous service on a dedicated host, for jobs whose nodes all run
// `dtrun --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...` without hosting it themselves.
#pragma once

#include <string>
#include <vector>

#include "launcher/cli_option.h"

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int RdzvServerCommand(const std::vector<std::string>& args);

// The flags of `dtrun rdzv-server`, for shell completion.
std::vector<CliOption> RdzvServerCommandFlags();

}  // namespace dtrun
