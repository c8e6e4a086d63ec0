#include "base/park_message.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dtrun {

std::string EncodeRelease(const std::vector<std::string>& env) {
  std::string payload;
  for (const std::string& entry : env) {
    payload += entry;
    payload.push_back('\0');
  }
  return absl::StrCat(payload.size(), "\n", payload);
}

absl::StatusOr<size_t> DecodeReleaseSize(absl::string_view header) {
  size_t n = 0;
  if (header.empty() || header.size() > kMaxReleaseHeaderBytes - 1 ||
      header.find_first_not_of("0123456789") != absl::string_view::npos || !absl::SimpleAtoi(header, &n) ||
      n > kMaxReleaseBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a release message must start with its size (at most ", kMaxReleaseBytes, " bytes)"));
  }
  return n;
}

absl::StatusOr<std::vector<std::string>> DecodeReleaseEnv(absl::string_view payload) {
  if (!payload.empty() && payload.back() != '\0') {
    return absl::InvalidArgumentError("a release message must end with a NUL");
  }
  std::vector<std::string> env;
  size_t at = 0;
  while (at < payload.size()) {
    const size_t end = payload.find('\0', at);
    absl::string_view entry = payload.substr(at, end - at);
    const size_t eq = entry.find('=');
    if (eq == 0 || eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("release entry ", env.size(), " is not NAME=value: '", entry.substr(0, 64), "'"));
    }
    env.emplace_back(entry);
    at = end + 1;
  }
  return env;
}

}  // namespace dtrun
