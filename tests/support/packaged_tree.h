// Test support: the Debian package's files laid out as on a node it was installed on, to run the
// installed programs rather than the build tree's (a cluster's nodes get the package, not a build).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace dtrun::testing {

// The packages made from this build (dtrun and dtrun-trainers, by CPack as scripts/build-deb.sh
// makes them) unpacked with `dpkg-deb -x` into one root, once per CTest run (OncePerSuite; once per
// process when run by hand): its `usr` directory (bin/, lib/dtrun/, share/), or why they could not
// be made.
absl::StatusOr<std::string> PackagedPrefix();

// PATH with the packaged programs first, for commands that find dtrun as a user's shell would.
std::string PathWithPackage(const std::string& prefix);

}  // namespace dtrun::testing
