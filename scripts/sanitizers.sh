#!/usr/bin/env bash
# The LibTorch-free targets built with clang under sanitizers, and their tests:
#   build-asan/  ASan + UBSan: unit, component and integration tests (LibTorch tests excluded); the
#                fuzzers are built here too (scripts/fuzz.sh), so every library has their coverage
#   build-tsan/  TSan: the unit, component and single-node integration tests (CTest labels; a
#                TSan-built dtrun; a race exits it with 66)
#   scripts/sanitizers.sh [asan|tsan]   (both by default)
# Leak checking is off: clang 14's LeakSanitizer tracer crashes at exit in multi-node dtrun
# processes (many threads, a subreaper) and turns a clean run into an abort.
# TSan leaves out the tests labelled component-grpc and integration-grpc (the rendezvous service,
# several nodes): the system's Abseil and gRPC are not instrumented, so TSan cannot see
# absl::Mutex's ordering there and would report races that are not there.
set -euo pipefail
cd "$(dirname "$0")/.."
kinds=("$@")
# The Python module's and dtplot's own unit tests run no code of ours that a sanitizer sees.
python_only='^(Python[A-Za-z]*UnitTest|DtplotUnitTest)$'
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan)
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
for kind in "${kinds[@]}"; do
  case "$kind" in
    asan) select=(-E "Torch|Training|Ddp|Cuda|LibTorch|$python_only") ;;
    tsan) select=(-L '^(unit|component|integration)$' -E "$python_only") ;;
    *) echo "unknown sanitizer build: $kind (asan or tsan)" >&2; exit 2 ;;
  esac
  dir=build-$kind
  began=$SECONDS
  scripts/clang-configure.sh "$kind"
  # A compiler that dies without a diagnostic (a CI run once lost two at once) is retried once, one
  # job at a time, with the machine's memory printed: a real compile error fails again, visibly.
  cmake --build "$dir" -j"$(nproc)" || {
    echo "== $kind: the build failed; memory and load now:"; free -m || true; uptime || true
    cmake --build "$dir" -j1
  }
  echo "== $kind: built in $((SECONDS - began)) s"
  began=$SECONDS
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir "$dir" --output-on-failure -j2 --timeout 300 "${select[@]}"
  echo "== $kind: tests took $((SECONDS - began)) s"
done
