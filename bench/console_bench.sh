#!/usr/bin/env bash
# Console relay throughput: 2 workers each print N short lines through dtrun to /dev/null.
#   bench/console_bench.sh BUILD_DIR [BUILD_DIR...]   (N=1000000 by default; REPEATS=5)
# Prints the median wall time per build; compare builds side by side in one run.
set -euo pipefail
N=${N:-1000000}
REPEATS=${REPEATS:-5}
for build in "$@"; do
  times=()
  for _ in $(seq "$REPEATS"); do
    start=$(date +%s.%N)
    OMP_NUM_THREADS=1 "$build/bin/dtrun" --standalone --nproc-per-node 2 /bin/sh -c \
      "yes 'loss=0.123 step=456 some training log line' | head -n $N" >/dev/null
    times+=("$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.3f", e - s }')")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (REPEATS + 1) / 2 ))p")
  echo "$build: 2 x $N lines in ${median} s (median of $REPEATS)"
done
