#!/usr/bin/env bash
# The Debian package in one command: installs what packaging needs, builds the packaged programs
# into build/ with their man pages and completion scripts, makes build/dtrun_<version>-1_<arch>.deb
# with CPack (cmake/packaging.cmake) and has lintian read it (docs/package/lintian.md says why
# each tag it still prints is there). The .deb's path is the last line printed.
#   scripts/build-deb.sh
#   apt install ./build/dtrun_*.deb        # then, on this or any bookworm machine
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh package
scripts/build.sh package_files
rm -f build/dtrun_*.deb
(cd build && cpack -G DEB >/dev/null)
deb=$(ls build/dtrun_*.deb)
echo "lintian:"
lintian --profile debian --suppress-tags-from-file docs/package/lintian-suppressed "$deb" | sed 's/^/  /' || true
echo "$(realpath "$deb")"
