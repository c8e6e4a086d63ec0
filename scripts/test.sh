#!/usr/bin/env bash
# The README's test command: install dependencies, build, run the whole suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
ctest --test-dir build --output-on-failure -j2 --timeout 300
# The GPU kit's CPU self-test: its .debs resolve and alone build dtrun and the worker library.
scripts/gpu-kit-selftest.sh
