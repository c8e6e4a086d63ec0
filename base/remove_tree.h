// Removes a directory tree (or a file) without std::filesystem. A program that links PyTorch's
// pip LibTorch binds std::filesystem::remove_all to the copy inside libtorch.so, built with an
// older libstdc++; on the GPU machine that copy jumped to address 0 (docs/BENCHMARKS.md, "On a
// GPU: one H200"). nftw(3) is the C library's and has no such twin.
#pragma once

#include <string>

namespace dtrun {

// Depth first, links not followed. True if nothing is left at `path` (also when nothing was).
bool RemoveTree(const std::string& path);

}  // namespace dtrun
