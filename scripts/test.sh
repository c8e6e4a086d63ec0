#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite with CTest, then
# the sanitizer builds, the fuzzers and the GPU kit's self-test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
DTRUN_WERROR=ON scripts/build.sh  # our code builds without a warning (clang's builds below check locks too)
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
# The clang builds (the LibTorch-free targets under ASan+UBSan, which also holds the fuzzers, and
# TSan) compile at the lowest priority while the suite runs: its tests spend much of their time
# waiting on processes, and the compilers take only the CPU they leave idle. Only where the disk
# has room for both the builds (~2.6 GB) and the package tests' peak (~4.8 GB, scripts/test-container.sh);
# elsewhere they build after the suite, as the sanitizer script does on its own.
clang_log=build/clang-builds.log
if scripts/disk-room.sh "clang builds beside the suite" build:9000 >/dev/null; then
  setsid nice -n 19 scripts/sanitizers.sh --build-only >"$clang_log" 2>&1 &
  clang_builds=$!
  trap 'kill -- -$clang_builds 2>/dev/null || true' EXIT  # its own process group (setsid): the compilers too
  ctest --test-dir build --output-on-failure -j2 --timeout 300
  wait "$clang_builds" || { tail -50 "$clang_log"; echo "the clang builds failed (whole log: $clang_log)" >&2; exit 1; }
  trap - EXIT
  echo "== the clang builds, made beside the suite: $(grep -c 'Building' "$clang_log") files compiled (log: $clang_log)"
else
  echo "== less than 9000 MiB free for the build folder: the clang builds wait for the suite"
  ctest --test-dir build --output-on-failure -j2 --timeout 300
  scripts/sanitizers.sh --build-only
fi
# Their tests, and short libFuzzer runs of the parsers.
scripts/sanitizers.sh --test-only
FUZZ_SECONDS=${FUZZ_SECONDS:-30} scripts/fuzz.sh
# The GPU kit's CPU self-test: its .debs resolve and alone build dtrun and the worker library.
scripts/gpu-kit-selftest.sh
