#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite with CTest, then
# the sanitizer builds, the fuzzers and the GPU kit's self-test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
DTRUN_WERROR=ON scripts/build.sh  # our code builds without a warning (clang's builds below check locks too)
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
ctest --test-dir build --output-on-failure -j2 --timeout 300
# The LibTorch-free targets under ASan+UBSan and TSan, and short libFuzzer runs of the parsers.
scripts/sanitizers.sh
FUZZ_SECONDS=${FUZZ_SECONDS:-30} scripts/fuzz.sh
# The GPU kit's CPU self-test: its .debs resolve and alone build dtrun and the worker library.
scripts/gpu-kit-selftest.sh
