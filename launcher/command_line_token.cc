#include "launcher/command_line_token.h"

#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_join.h"

namespace dtrun {
namespace {

// Where the token's value is in `args`: (index, offset) — the word after --rdzv-token, or the
// part after '=' in --rdzv-token=X. Nothing after "--" is dtrun's.
std::vector<std::pair<size_t, size_t>> TokenValues(const std::vector<std::string_view>& args) {
  std::vector<std::pair<size_t, size_t>> at;
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    std::string_view a = args[i];
    if (a == "--rdzv-token" || a == "--rdzv_token") {
      if (i + 1 < args.size()) at.emplace_back(++i, 0);
    } else if (a.rfind("--rdzv-token=", 0) == 0 || a.rfind("--rdzv_token=", 0) == 0) {
      at.emplace_back(i, a.find('=') + 1);
    }
  }
  return at;
}

}  // namespace

std::string RedactedCommandLine(const std::vector<std::string>& args) {
  std::vector<std::string> shown = args;
  for (auto [i, offset] : TokenValues({args.begin(), args.end()})) shown[i] = shown[i].substr(0, offset) + "***";
  return absl::StrJoin(shown, " ");
}

bool HideTokenInArgv(int argc, char** argv) {
  std::vector<std::pair<size_t, size_t>> at = TokenValues({argv + 1, argv + argc});
  for (auto [i, offset] : at) {
    char* value = argv[i + 1] + offset;
    std::memset(value, '*', std::strlen(value));
  }
  return !at.empty();
}

}  // namespace dtrun
