#!/usr/bin/env bash
# Our code built with clang under sanitizers, and its tests:
#   build-asan/  ASan + UBSan, the LibTorch-free targets: unit, component and integration tests
#                (LibTorch tests excluded); the fuzzers are built here too (scripts/fuzz.sh), so
#                every library has their coverage
#   build-tsan/  TSan, the LibTorch-free targets: the unit, component and single-node integration
#                tests (CTest labels; a TSan-built dtrun; a race exits it with 66)
#   build-tsan-torch/  TSan with LibTorch: the worker library's tests (label `worker`). Their
#                threads (a snapshot's copier, a rescue from the stop-signal thread, ranks in one
#                process) are the worker's own, out of reach of the tree above; this clang build
#                also checks the worker's lock annotations. Debian's LibTorch is not instrumented:
#                OMP_NUM_THREADS=1 and ignore_noninstrumented_modules keep out reports about its
#                own threads' memory, which TSan cannot follow. TSAN_TORCH_TESTS='<ctest -R regex>'
#                also builds the trainers and the integration tests there and runs those it
#                matches, e.g. '^RecoveryTest\.' (TSan-built train_imagenet ranks rescuing their
#                state on a stop signal; ~15 min on 2 cores, so not in CI).
#   scripts/sanitizers.sh [asan|tsan|tsan-torch]   (all three by default)
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
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan tsan-torch)
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
tsan_options=halt_on_error=1:second_deadlock_stack=1
ctest_run() {
  ctest --test-dir "$dir" --output-on-failure -j2 --timeout 300 "$@"
}
for kind in "${kinds[@]}"; do
  targets=()  # the whole tree
  case "$kind" in
    asan) select=(-E "Torch|Training|Ddp|Cuda|LibTorch|$python_only") ;;
    tsan) select=(-L '^(unit|component|integration)$' -E "$python_only") ;;
    tsan-torch)
      targets=(--target dtrun_worker_tests)
      [ -z "${TSAN_TORCH_TESTS:-}" ] || targets+=(dtrun_integration_tests)
      ;;
    *) echo "unknown sanitizer build: $kind (asan, tsan or tsan-torch)" >&2; exit 2 ;;
  esac
  dir=build-$kind
  began=$SECONDS
  scripts/clang-configure.sh "$kind"
  # A compiler that dies without a diagnostic (a CI run once lost two at once) is retried once, one
  # job at a time, with the machine's memory printed: a real compile error fails again, visibly.
  cmake --build "$dir" -j"$(nproc)" "${targets[@]}" || {
    echo "== $kind: the build failed; memory and load now:"; free -m || true; uptime || true
    cmake --build "$dir" -j1 "${targets[@]}"
  }
  echo "== $kind: built in $((SECONDS - began)) s"
  began=$SECONDS
  if [ "$kind" = tsan-torch ]; then
    export OMP_NUM_THREADS=1 TSAN_OPTIONS=$tsan_options:ignore_noninstrumented_modules=1
    # One process for them all: under CTest each test's start (LibTorch under TSan) made it 95 s
    # instead of 12; gtest prints only the failures.
    timeout 900 "$dir/bin/dtrun_worker_tests" --gtest_brief=1
    # A trainer under TSan runs ~10x slower than in the main tree.
    [ -z "${TSAN_TORCH_TESTS:-}" ] || ctest_run -R "$TSAN_TORCH_TESTS" --timeout 1200
    unset OMP_NUM_THREADS
  else
    TSAN_OPTIONS=$tsan_options ctest_run "${select[@]}"
  fi
  echo "== $kind: tests took $((SECONDS - began)) s"
done
