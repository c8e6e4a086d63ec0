#!/usr/bin/env bash
# CPU self-test of the GPU kit (run by scripts/test.sh): the package list of
# scripts/gpu-kit-fetch.sh resolves and downloads, and the unpacked prefix alone supplies every
# build dependency but LibTorch: dtrun and dtdata (configured without LibTorch), which between them use every package of the kit
# (the worker library adds LibTorch alone, so it is left out: it was most of this test's time), are
# built with CMake and pkg-config pointed at the prefix, and the build is checked to have read no
# header and linked no library of those packages from the system; then the kit-built dtrun starts
# a job. A package missing from the kit fails here instead of on a GPU machine.
#   scripts/gpu-kit-selftest.sh [BUILD_DIR]     (default build-kit/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-kit}
[ -n "$(ls .gpu-kit/debs/*.deb 2>/dev/null)" ] || scripts/gpu-kit-fetch.sh
source scripts/gpu-kit-env.sh
kit_setup
rm -f "$build/CMakeCache.txt"  # pkg-config results are cached: always resolve against the kit afresh
# Unoptimised: the build checks where headers and libraries come from, and code generation at
# -O3 was most of its time.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" \
  -DDTRUN_WITH_TESTS=OFF -DDTRUN_WITH_TORCH=OFF "${KIT_CMAKE_ARGS[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target dtrun dtdata
# Nothing the kit provides may come from the system: fail on any system path (arg 2) that the
# kit's copy (arg 3, as system paths) also has.
only_from_kit() {
  local leaked
  leaked=$(comm -12 <(echo "$2" | sort -u) <(echo "$3" | sort -u) | head -5)
  [ -z "$leaked" ] || { echo "gpu-kit self-test: the build $1 the kit provides:" $leaked >&2; exit 1; }
}
lib=/usr/lib/x86_64-linux-gnu
only_from_kit "read system headers" \
  "$(ninja -C "$build" -t deps | grep -E '^ +/usr/include/' | sed 's/^ *//')" \
  "$(cd "$KIT_PREFIX/usr/include" && find . -type f | sed 's|^\./|/usr/include/|')"
only_from_kit "linked system libraries" \
  "$(ninja -C "$build" -t commands dtrun dtdata | tr ' ' '\n' | grep "^$lib/")" \
  "$(cd "$KIT_PREFIX$lib" && ls | grep -E '\.(so|a)' | sed "s|^|$lib/|")"
"$build/bin/dtrun" --standalone --nproc-per-node 2 /bin/sh -c 'echo "KIT_OK rank=$RANK"' | grep -c KIT_OK | grep -qx 2
echo "gpu-kit self-test: OK ($(ls .gpu-kit/debs | wc -l) packages, $(du -sm .gpu-kit/debs | cut -f1) MiB)"
