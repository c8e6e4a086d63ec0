#!/usr/bin/env bash
# The Debian packages in one command: installs what packaging needs, builds the packaged programs
# into build/ with their man pages and completion scripts, makes build/dtrun_<version>-1_<arch>.deb
# (the launcher) and build/dtrun-trainers_<version>-1_<arch>.deb (the C++ trainers and tools, with
# Debian's LibTorch) with CPack (cmake/packaging.cmake), and has lintian read them
# (docs/package/lintian.md says why each tag it still prints is there). The last lines printed are
# the two .debs' paths.
#   scripts/build-deb.sh
#   apt install ./build/dtrun_*.deb [./build/dtrun-trainers_*.deb]   # on this or any bookworm machine
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh package
scripts/build.sh package_files
rm -f build/dtrun_*.deb build/dtrun-trainers_*.deb
(cd build && cpack -G DEB >/dev/null)
debs=(build/dtrun_*.deb build/dtrun-trainers_*.deb)
echo "lintian:"
lintian --profile debian --suppress-tags-from-file docs/package/lintian-suppressed "${debs[@]}" | sed 's/^/  /' || true
realpath "${debs[@]}"
