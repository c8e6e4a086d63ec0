// Shared parsing for `dtrun kill`, `dtrun status` and `dtrun rdzv-server`, and the plain description
// of a command's flags that `dtrun completion` writes scripts from.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "launcher/cli_option.h"

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

// The flags `app` defines (positional arguments left out), in definition order.
inline std::vector<CliOption> DescribeFlags(const CLI::App& app) {
  std::vector<CliOption> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional()) continue;
    CliOption o;
    for (const std::string& name : opt->get_lnames()) o.names.push_back("--" + name);
    for (const std::string& name : opt->get_snames()) o.names.push_back("-" + name);
    o.takes_value = opt->get_expected_max() > 0;  // flags expect no value
    o.help = opt->get_description();
    out.push_back(std::move(o));
  }
  return out;
}

// The flags of a command whose CLI `define` builds into an app bound to a Flags struct.
template <typename Flags>
std::vector<CliOption> DescribeCommand(const char* about, const char* name, void (*define)(CLI::App&, Flags&)) {
  CLI::App app(about, name);
  Flags flags;
  define(app, flags);
  return DescribeFlags(app);
}

}  // namespace dtrun
