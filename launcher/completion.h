// `dtrun completion bash|zsh`: shell completion scripts written from the commands' own flag
// definitions, so a new flag is completed without anyone editing a script. The Debian package
// installs their output; from a build tree: `source <(dtrun completion bash)`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "launcher/cli_option.h"

namespace dtrun {

// One command of `dtrun`: "" for the launch itself (`dtrun [options] PROGRAM`), else a subcommand.
struct CompletedCommand {
  std::string name;
  std::vector<CliOption> flags;
};

// Every command with its flags, as the binary defines them.
std::vector<CompletedCommand> DtrunCommands();

// The script for `shell` ("bash" or "zsh"); InvalidArgument naming the shells otherwise.
absl::StatusOr<std::string> CompletionScript(absl::string_view shell, const std::vector<CompletedCommand>& commands);

// The subcommand: prints the script, returns the exit code.
int CompletionCommand(const std::vector<std::string>& args);

}  // namespace dtrun
