#!/usr/bin/env bash
# The README's main-job command. Until the training library lands (issue 4) it runs the real
# distributed examples under dtrun: a C++ LibTorch worker and an unmodified PyTorch script, each
# with 4 processes doing a Gloo all_reduce through dtrun's store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
echo "== C++ LibTorch workers (examples/allreduce_check) =="
build/bin/dtrun --standalone --nproc-per-node 4 build/bin/allreduce_check
echo "== PyTorch script (tests/integration/workers/gloo_allreduce.py) =="
build/bin/dtrun --standalone --nproc-per-node 4 tests/integration/workers/gloo_allreduce.py
