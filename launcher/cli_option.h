// A command's flags as plain data: what `dtrun completion` writes shell scripts from (no CLI11 here).
#pragma once

#include <string>
#include <vector>

namespace dtrun {

// One flag of a command, as a shell completes it.
struct CliOption {
  std::vector<std::string> names;  // every spelling, e.g. {"--nproc-per-node", "--nproc_per_node"}
  bool takes_value = false;
  std::string help;
};

}  // namespace dtrun
