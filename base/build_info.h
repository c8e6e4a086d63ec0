// What this build is: version, source commit, and the LibTorch/CUDA the tree was built against.
// The values are written at build time by cmake/write_build_info.cmake (the commit is re-read on
// every build, so a rebuild after a commit never reports the old one).
#pragma once

#include <string>

namespace dtrun {

struct BuildInfo {
  const char* version;  // the project's version, e.g. "0.1.0"
  const char* commit;   // `git describe --always --dirty`, or "unknown" outside a checkout
  const char* torch;    // LibTorch version the worker library was built with, or "none"
  const char* cuda;     // CUDA version of that LibTorch, or "none" (CPU build)
  const char* compiler;
};

const BuildInfo& ThisBuild();

// `--version`: "dtrun 0.1.0 (commit …)" and a line naming the LibTorch, CUDA and compiler of the build
// (dtrun itself links no LibTorch; the trainers packaged with it do).
std::string VersionText(const char* program);

}  // namespace dtrun
