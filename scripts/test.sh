#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite with CTest, then
# the sanitizer builds, the fuzzers and the GPU kit's self-test. Each phase's time is printed as it
# ends ("== test.sh: ..."), so a CI log shows where the time went.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
phase() {
  local name=$1 began=$SECONDS
  shift
  "$@"
  echo "== test.sh: $name took $((SECONDS - began)) s ($((SECONDS - start)) s in all)"
}
phase "installing dependencies" scripts/install-deps.sh
# Our code builds without a warning (clang's builds below check locks too).
phase "the build" env DTRUN_WERROR=ON scripts/build.sh
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
phase "the suite" ctest --test-dir build --output-on-failure -j2 --timeout 300
# The LibTorch-free targets under ASan+UBSan and TSan, and short libFuzzer runs of the parsers.
phase "the sanitizer builds and suites" scripts/sanitizers.sh
phase "the fuzzers" env FUZZ_SECONDS="${FUZZ_SECONDS:-30}" scripts/fuzz.sh
# The GPU kit's CPU self-test: its .debs resolve and alone build dtrun and dtdata.
phase "the GPU kit's self-test" scripts/gpu-kit-selftest.sh
