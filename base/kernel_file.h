// The small files the kernel keeps under /proc and /sys (or a test's fake root standing in for
// them), read as untrusted: never through a symlink at the end, never blocking, at most 64 KiB.
// What the CPU topology, the GPU inventory and the GPU probes read.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dtrun {

// The file's text without surrounding whitespace; "" where it is missing, unreadable or too large.
std::string ReadKernelFile(const std::string& path);

// The integer the file holds ("1\n"); nullopt where it holds anything else.
std::optional<int64_t> ReadKernelNumber(const std::string& path);

}  // namespace dtrun
