// The per-user directory where dtrun keeps its registry and each launch's private files.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dtrun {

// $DTRUN_RUNTIME_DIR, else $XDG_RUNTIME_DIR/dtrun, else /tmp/dtrun-<uid>; created 0700. Checked at
// every call: a directory (not a symlink) owned by this user with no access for others, else
// FailedPrecondition naming the path and the fix (another local user may have planted it).
absl::StatusOr<std::string> RuntimeDir();

}  // namespace dtrun
