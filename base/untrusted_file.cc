#include "base/untrusted_file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"

namespace dtrun {

absl::StatusOr<std::string> ReadUntrustedFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    return absl::OutOfRangeError(absl::StrCat(path, " is ", st.st_size, " bytes, more than the ", max_bytes, " read"));
  }
  // To the end, not to st_size: a kernel file (/proc, /sys) says 0, and a file may change meanwhile.
  std::string data;
  char buf[16 << 10];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the end, or an error: what was there
    if (data.size() + static_cast<size_t>(n) > max_bytes) {
      return absl::OutOfRangeError(absl::StrCat(path, " grew past the ", max_bytes, " bytes read"));
    }
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

}  // namespace dtrun
