#include "worker/host_memory.h"

#include <climits>  // also defines __GLIBC__ on glibc systems

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace dtrun::worker {

bool RetainFreedHostMemory() {
#if defined(__GLIBC__)
  // No mmap-backed chunks: large blocks come from the heap and go back to its free lists. A thread
  // arena that cannot hold a block falls back to the main arena, so no allocation fails for this.
  const bool no_mmap = mallopt(M_MMAP_MAX, 0) == 1;
  // Never shrink the heap top on free (the next step would fault the pages in again).
  const bool no_trim = mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
  return no_mmap && no_trim;
#else
  return false;
#endif
}

}  // namespace dtrun::worker
