#include "base/open_file_limit.h"

#include <sys/resource.h>

namespace dtrun {

size_t OpenFileLimit() {
  rlimit lim{};
  return ::getrlimit(RLIMIT_NOFILE, &lim) == 0 ? static_cast<size_t>(lim.rlim_cur) : 1024;
}

}  // namespace dtrun
