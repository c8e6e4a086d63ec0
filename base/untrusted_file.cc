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
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd.get(), data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // shrunk meanwhile: what was there
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

}  // namespace dtrun
