#include "base/remove_tree.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

namespace dtrun {
namespace {

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  // Keep going past an entry that cannot be removed: as much as possible goes.
  ::remove(path);
  return 0;
}

}  // namespace

bool RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  ::nftw(path.c_str(), RemoveEntry, /*nopenfd=*/16, FTW_DEPTH | FTW_PHYS);
  return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT;
}

}  // namespace dtrun
