#include "base/host_name.h"

#include <unistd.h>

namespace dtrun {

std::string LocalHostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace dtrun
