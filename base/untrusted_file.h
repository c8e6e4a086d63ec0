// Reads a file that someone else may have written (a worker's error file, a registry record):
// never through a symlink, never blocking (a FIFO or a device is refused, not opened for reading
// forever), only regular files, and only up to a size the caller names. Read to its end, so kernel
// files (/proc, /sys), whose size reads as 0, are read too.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace dtrun {

// The file's bytes. Errors: NotFound (missing or a symlink), FailedPrecondition (not a regular
// file), OutOfRange (larger than `max_bytes`; the message gives its size).
absl::StatusOr<std::string> ReadUntrustedFile(const std::string& path, size_t max_bytes);

}  // namespace dtrun
