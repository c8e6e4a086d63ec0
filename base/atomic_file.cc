#include "base/atomic_file.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace dtrun {

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents, mode_t mode) {
  const std::string tmp = path + ".tmp";
  {
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode));
    if (!out.valid() || !WriteAll(out.get(), contents.data(), contents.size())) {
      return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp, ": ", strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace dtrun
