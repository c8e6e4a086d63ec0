// `dtrun rdzv-server`: the rendezvous service on a dedicated host, for jobs whose nodes all run
// `dtrun --rdzv-backend c10d --rdzv-endpoint HOST:PORT ...` without hosting it themselves.
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// Returns the process exit code. `args` excludes the subcommand name.
int RdzvServerCommand(const std::vector<std::string>& args);

}  // namespace dtrun
