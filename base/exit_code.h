// dtrun's exit code for a command that could not do its work, from why (every subcommand).
#pragma once

#include "absl/status/status.h"

namespace dtrun {

// 2 when it cannot run as given (a flag, a directory, an address, the gRPC module:
// InvalidArgument, FailedPrecondition, PermissionDenied), as for a command line that does not
// parse; 1 when something it needs did not answer or was taken (a port, a host, the service).
inline int ExitCodeFor(const absl::Status& why) {
  switch (why.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
      return 2;
    default:
      return 1;
  }
}

}  // namespace dtrun
