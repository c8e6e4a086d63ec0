#!/usr/bin/env bash
# Configures and builds into build/ (Release-with-debug-info, ccache when present).
#   scripts/build.sh              everything (the test command)
#   scripts/build.sh TARGET...    only those (the main job builds what it runs)
set -euo pipefail
cd "$(dirname "$0")/.."
# DTRUN_WERROR=ON (the test command sets it): warnings are errors (docs/DESIGN.md, "Build time").
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo ${DTRUN_WERROR:+-DDTRUN_WERROR=$DTRUN_WERROR} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
