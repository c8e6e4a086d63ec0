#include "launcher/completion.h"

#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "launcher/kill_command.h"
#include "launcher/launch_config.h"
#include "launcher/rdzv_server_command.h"
#include "launcher/status_command.h"

namespace dtrun {
namespace {

// What a flag's value is, where a shell can offer more than nothing. Keyed by the flag's first
// spelling; a flag means the same in every command that has it.
enum class ValueKind { kAny, kFile, kDirectory, kWords };
struct ValueHint {
  ValueKind kind = ValueKind::kAny;
  std::vector<std::string> words;
};

ValueHint HintFor(const std::string& flag) {
  static const std::map<std::string, ValueHint> kHints = {
      {"--nproc-per-node", {ValueKind::kWords, {"cpu", "gpu", "cuda", "xpu", "auto"}}},
      {"--rdzv-backend", {ValueKind::kWords, {"static", "c10d"}}},
      {"--numa-binding", {ValueKind::kWords, {"node", "socket", "exclusive", "core-complex"}}},
      {"--on-straggler", {ValueKind::kWords, {"warn", "replace"}}},
      {"--warm-workers", {ValueKind::kWords, {"on", "off"}}},
      {"--snapshot-memory", {ValueKind::kWords, {"auto", "0"}}},
      {"--start-method", {ValueKind::kWords, {"spawn", "fork", "forkserver"}}},
      {"--redirects", {ValueKind::kWords, {"0", "1", "2", "3"}}},
      {"--tee", {ValueKind::kWords, {"0", "1", "2", "3"}}},
      {"--signal", {ValueKind::kWords, {"SIGTERM", "SIGINT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGHUP"}}},
      {"--log-dir", {ValueKind::kDirectory, {}}},
      {"--snapshot-dir", {ValueKind::kDirectory, {}}},
      {"--event-log", {ValueKind::kFile, {}}},
      {"--rdzv-token-file", {ValueKind::kFile, {}}},
      {"--rdzv-tls-cert", {ValueKind::kFile, {}}},
      {"--rdzv-tls-key", {ValueKind::kFile, {}}},
      {"--rdzv-tls-ca", {ValueKind::kFile, {}}},
  };
  auto it = kHints.find(flag);
  return it == kHints.end() ? ValueHint{} : it->second;
}

constexpr char kShells[] = "bash zsh";

std::vector<std::string> SubcommandNames(const std::vector<CompletedCommand>& commands) {
  std::vector<std::string> out;
  for (const CompletedCommand& c : commands) {
    if (!c.name.empty()) out.push_back(c.name);
  }
  return out;
}

// --- bash ---------------------------------------------------------------------------------------

std::string BashCommandKey(const CompletedCommand& c) { return c.name.empty() ? "launch" : c.name; }

std::string BashValueCase(const CliOption& o) {
  ValueHint hint = HintFor(o.names.front());
  std::string action;
  switch (hint.kind) {
    case ValueKind::kWords:
      action = absl::StrCat("COMPREPLY=($(compgen -W \"", absl::StrJoin(hint.words, " "), "\" -- \"$cur\"))");
      break;
    case ValueKind::kFile:
      action = "COMPREPLY=($(compgen -f -- \"$cur\"))";
      break;
    case ValueKind::kDirectory:
      action = "COMPREPLY=($(compgen -d -- \"$cur\"))";
      break;
    case ValueKind::kAny:
      action = "COMPREPLY=()";
      break;
  }
  return absl::StrCat("      ", absl::StrJoin(o.names, "|"), ") ", action, "; return 0 ;;\n");
}

std::string BashScript(const std::vector<CompletedCommand>& commands) {
  std::string flags_fn = "_dtrun_flags() {\n  case $1 in\n";
  std::string values_fn = "# Completes the value of flag $2 of command $1; fails if $2 takes none.\n"
                          "_dtrun_value() {\n  case $1 in\n";
  for (const CompletedCommand& c : commands) {
    std::vector<std::string> names;
    std::string cases;
    for (const CliOption& o : c.flags) {
      names.insert(names.end(), o.names.begin(), o.names.end());
      if (o.takes_value) cases += BashValueCase(o);
    }
    absl::StrAppend(&flags_fn, "    ", BashCommandKey(c), ") echo \"", absl::StrJoin(names, " "), "\" ;;\n");
    absl::StrAppend(&values_fn, "    ", BashCommandKey(c), ")\n      case $2 in\n", cases, "      esac ;;\n");
  }
  absl::StrAppend(&flags_fn, "  esac\n}\n");
  absl::StrAppend(&values_fn, "  esac\n  return 1\n}\n");
  const std::string subcommands = absl::StrJoin(SubcommandNames(commands), " ");
  return absl::StrCat(
      "# bash completion for dtrun (written by `dtrun completion bash`)\n", flags_fn, values_fn,
      "_dtrun() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd=launch i w\n"
      "  COMPREPLY=()\n"
      "  # bash splits --flag=value at '=': complete the value of the flag before it.\n"
      "  if [[ $cur == = ]]; then cur=\"\"; elif [[ $prev == = ]]; then prev=${COMP_WORDS[COMP_CWORD-2]}; fi\n"
      "  case ${COMP_WORDS[1]} in\n    ", absl::StrJoin(SubcommandNames(commands), "|"),
      ") cmd=${COMP_WORDS[1]} ;;\n  esac\n"
      "  if [[ $cmd == launch ]]; then\n"
      "    # Once PROGRAM is given, the words after it are the program's.\n"
      "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "      w=${COMP_WORDS[i]}\n"
      "      if [[ ${COMP_WORDS[i+1]} == = ]]; then ((i += 2)); continue; fi\n"
      "      if [[ $w == -* ]]; then\n"
      "        _dtrun_value launch \"$w\" >/dev/null && ((i++))\n"
      "        continue\n"
      "      fi\n"
      "      if declare -F _command_offset >/dev/null; then _command_offset \"$i\"; else\n"
      "        COMPREPLY=($(compgen -f -- \"$cur\")); fi\n"
      "      return 0\n"
      "    done\n"
      "    COMPREPLY=()\n"
      "  fi\n"
      "  if [[ $cmd == completion ]]; then COMPREPLY=($(compgen -W \"", kShells, "\" -- \"$cur\")); return 0; fi\n"
      "  if [[ $prev == -* ]] && _dtrun_value \"$cmd\" \"$prev\"; then return 0; fi\n"
      "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$(_dtrun_flags \"$cmd\")\" -- \"$cur\")); return 0; fi\n"
      "  if [[ $cmd == launch ]]; then\n"
      "    (( COMP_CWORD == 1 )) && COMPREPLY=($(compgen -W \"", subcommands, "\" -- \"$cur\"))\n"
      "    COMPREPLY+=($(compgen -f -- \"$cur\"))\n"
      "  fi\n"
      "  return 0\n"
      "}\n"
      "complete -o filenames -F _dtrun dtrun\n");
}

// --- zsh ----------------------------------------------------------------------------------------

// Text inside an _arguments spec, itself inside single quotes.
std::string ZshEscape(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"'", "'\\''"}, {"[", "\\["}, {"]", "\\]"}, {":", "\\:"}});
}

std::string ZshValueAction(const CliOption& o) {
  ValueHint hint = HintFor(o.names.front());
  switch (hint.kind) {
    case ValueKind::kWords:
      return absl::StrCat(":value:(", absl::StrJoin(hint.words, " "), ")");
    case ValueKind::kFile:
      return ":file:_files";
    case ValueKind::kDirectory:
      return ":directory:_files -/";
    case ValueKind::kAny:
      break;
  }
  return ":value: ";
}

std::string ZshSpecs(const CompletedCommand& c) {
  std::string out;
  for (const CliOption& o : c.flags) {
    const std::string exclusive = o.names.size() > 1 ? absl::StrCat("(", absl::StrJoin(o.names, " "), ")") : "";
    for (const std::string& name : o.names) {
      const bool is_long = name.size() > 2;
      const std::string form = !o.takes_value ? name : is_long ? name + "=" : name + "+";
      absl::StrAppend(&out, "    '", exclusive, form, "[", ZshEscape(o.help), "]",
                      o.takes_value ? ZshValueAction(o) : "", "'\n");
    }
  }
  return out;
}

std::string ZshScript(const std::vector<CompletedCommand>& commands) {
  std::string subcommand_cases;
  std::string launch_specs;
  for (const CompletedCommand& c : commands) {
    if (c.name.empty()) {
      launch_specs = ZshSpecs(c);
      continue;
    }
    absl::StrAppend(&subcommand_cases, "    ", c.name, ")\n      shift words; (( CURRENT-- ))\n",
                    "      _arguments -S \\\n", absl::StrReplaceAll(ZshSpecs(c), {{"'\n", "' \\\n"}}),
                    "        && return 0; return 1 ;;\n");
  }
  absl::StrAppend(&subcommand_cases, "    completion) _values shell ", kShells, "; return ;;\n");
  return absl::StrCat(
      "#compdef dtrun\n# zsh completion for dtrun (written by `dtrun completion zsh`)\n"
      "_dtrun_program() {\n"
      "  _alternative 'subcommands:subcommand:(", absl::StrJoin(SubcommandNames(commands), " "),
      ")' 'files:program:_files'\n}\n"
      "_dtrun() {\n"
      "  case $words[2] in\n",
      subcommand_cases,
      "  esac\n"
      "  _arguments -S \\\n",
      absl::StrReplaceAll(launch_specs, {{"'\n", "' \\\n"}}),
      "    '1:program:_dtrun_program' \\\n"
      "    '*::arguments:_normal'\n"
      "}\n"
      "_dtrun \"$@\"\n");
}

}  // namespace

std::vector<CompletedCommand> DtrunCommands() {
  return {
      {"", LaunchFlags()},
      {"kill", KillCommandFlags()},
      {"status", StatusCommandFlags()},
      {"rdzv-server", RdzvServerCommandFlags()},
      {"completion", {}},
  };
}

absl::StatusOr<std::string> CompletionScript(absl::string_view shell, const std::vector<CompletedCommand>& commands) {
  if (shell == "bash") return BashScript(commands);
  if (shell == "zsh") return ZshScript(commands);
  return absl::InvalidArgumentError(
      absl::StrCat("no completion for shell '", shell, "'; use one of: ", kShells, " (e.g. dtrun completion bash)"));
}

int CompletionCommand(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("Usage: dtrun completion bash|zsh\nPrints a completion script for the shell, e.g.\n"
                "  source <(dtrun completion bash)           # this bash session\n"
                "  dtrun completion zsh > ~/.zfunc/_dtrun     # zsh, with ~/.zfunc on $fpath\n");
    return 0;
  }
  if (args.size() != 1) {
    std::fprintf(stderr, "dtrun completion: error: name one shell: dtrun completion bash|zsh\n");
    return 2;
  }
  absl::StatusOr<std::string> script = CompletionScript(args[0], DtrunCommands());
  if (!script.ok()) {
    std::fprintf(stderr, "dtrun completion: error: %s\n", std::string(script.status().message()).c_str());
    return 2;
  }
  std::fputs(script->c_str(), stdout);
  return 0;
}

}  // namespace dtrun
