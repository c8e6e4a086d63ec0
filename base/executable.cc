#include "base/executable.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"

namespace dtrun {

absl::StatusOr<std::string> FindExecutable(const std::string& program) {
  auto check = [](const std::string& path) -> absl::Status {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    if (S_ISDIR(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, " is not executable; run chmod +x ", path, " or pass a .py script"));
    }
    return absl::OkStatus();
  };
  if (program.find('/') != std::string::npos) {
    DT_RETURN_IF_ERROR(check(program));
    return program;
  }
  const char* path_env = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path_env ? path_env : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (check(candidate).ok()) return candidate;
  }
  return absl::NotFoundError(absl::StrCat("program '", program, "' not found on PATH"));
}

std::string RunningExecutable() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe));
  return n > 0 && static_cast<size_t>(n) < sizeof(exe) ? std::string(exe, static_cast<size_t>(n)) : "";
}

}  // namespace dtrun
