#include "base/runtime_dir.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "base/env_names.h"

namespace dtrun {

absl::StatusOr<std::string> RuntimeDir() {
  std::string dir;
  if (const char* d = std::getenv(env::kDtrunRuntimeDir); d && *d) {
    dir = d;
  } else if (const char* x = std::getenv(env::kRuntimeDir); x && *x) {
    dir = absl::StrCat(x, "/dtrun");
  } else {
    dir = absl::StrCat("/tmp/dtrun-", ::getuid());
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the runtime directory ", dir, ": ",
                                                      strerror(errno), "; set DTRUN_RUNTIME_DIR to a private directory"));
  }
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() ||
      (st.st_mode & 077) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the runtime directory ", dir, " is not private to you (it must be a directory, not a link, owned by uid ",
        ::geteuid(), " with mode 0700; another user may have created it); remove it, or set DTRUN_RUNTIME_DIR to a "
        "private directory"));
  }
  return dir;
}

}  // namespace dtrun
