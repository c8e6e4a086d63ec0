// Replaces a small file in one step (write a temporary next to it, then rename), so a reader sees
// the old contents or the new, never half of them. Never follows a symlink at the temporary.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace dtrun {

// PermissionDenied naming the path and the reason.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents, mode_t mode);

}  // namespace dtrun
