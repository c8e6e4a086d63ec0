// Finding the program to run, as a shell would.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dtrun {

// Resolves `program` like execvp: a name containing '/' is used as is, otherwise PATH is searched.
// Errors: NotFound (no such file), PermissionDenied (exists but not executable).
absl::StatusOr<std::string> FindExecutable(const std::string& program);

// The path of the running program (/proc/self/exe), or "" if the kernel does not tell it.
std::string RunningExecutable();

}  // namespace dtrun
