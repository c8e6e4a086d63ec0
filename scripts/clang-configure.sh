#!/usr/bin/env bash
# Configures one of CI's clang builds of the LibTorch-free targets, the same way from every script
# that uses it (a different cache would rebuild the tree from scratch):
#   build-asan/  ASan + UBSan, with libFuzzer's coverage in every library: the sanitizer tests
#                (scripts/sanitizers.sh) and the fuzzers (scripts/fuzz.sh) share one build
#   build-tsan/  TSan
#   build-tsan-torch/  TSan with LibTorch: the worker library and its tests (and, when asked, the
#                trainers), whose threads the LibTorch-free tree does not have
#   scripts/clang-configure.sh asan|tsan|tsan-torch
set -euo pipefail
cd "$(dirname "$0")/.."
torch=OFF
case "${1:-}" in
  asan) args=(-DDTRUN_SANITIZE=address,undefined -DDTRUN_FUZZ=ON) ;;
  tsan) args=(-DDTRUN_SANITIZE=thread) ;;
  tsan-torch) args=(-DDTRUN_SANITIZE=thread) torch=ON ;;
  *) echo "clang-configure: unknown build '${1:-}' (asan, tsan or tsan-torch)" >&2; exit 2 ;;
esac
# -DDTRUN_WERROR: warnings are errors and clang checks the lock annotations (-Wthread-safety).
# -O1 and line tables only: what the sanitizers' reports need (file:line in every frame), and ~20%
# less compile time than RelWithDebInfo's -O2 -g (docs/BENCHMARKS.md, "The test command's time").
opt="-O1 -gline-tables-only -DNDEBUG"
CC=clang CXX=clang++ cmake -S . -B "build-$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTRUN_WITH_TORCH=$torch \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" -DDTRUN_WERROR=ON "${args[@]}" >/dev/null
