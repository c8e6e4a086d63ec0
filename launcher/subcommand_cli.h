// Shared parsing for `dtrun kill`, `dtrun status` and `dtrun rdzv-server`.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace dtrun {

// Parses `args` (what follows the subcommand). Returns the exit code to stop with — 0 after
// printing --help, 2 after a one-line error — or nullopt to go on.
inline std::optional<int> ParseSubcommand(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: error: %s; run %s --help\n", app.get_name().c_str(), e.what(), app.get_name().c_str());
    return 2;
  }
  return std::nullopt;
}

}  // namespace dtrun
