#!/bin/bash
# train_recsys (Adam, lazy Adam) and the PyTorch reference on netlib's reference BLAS and on the
# system's default (OpenBLAS after scripts/install-deps.sh), alternating, two rounds: the same
# binaries, the reference library chosen with LD_LIBRARY_PATH. 2 ranks under dtrun, batch 256 per
# rank, 200 timed steps.
#   bench/blas_ab.sh [BUILD_DIR] RATINGS.csv...   (e.g. the files bench/lazy_adam.sh wrote)
set -euo pipefail
B=$(realpath "${1:-build}")/bin
shift
REF=$(dirname "$(realpath "$0")")/recsys_reference.py
REFERENCE_BLAS=/usr/lib/x86_64-linux-gnu/blas
[ -e "$REFERENCE_BLAS/libblas.so.3" ] || { echo "needs netlib's BLAS: apt install libblas3"; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
for data in "$@"; do
  for round in 1 2; do
    for blas in reference default; do
      lib=(); [ $blas = reference ] && lib=(env LD_LIBRARY_PATH=$REFERENCE_BLAS)
      for opt in adam lazy; do
        extra=(); [ $opt = lazy ] && extra=(--lazy-adam)
        "${lib[@]}" "$B/dtrun" --standalone --nproc-per-node 2 "$B/train_recsys" "$data" --output-dir "$W/run" \
          --no-tensorboard -b 256 --warmup-iters 10 --timed-iters 200 --bench-json "$W/j.json" "${extra[@]}" \
          >"$W/log" 2>&1 || { cat "$W/log"; exit 1; }
        echo "$(basename "$data") $blas $opt round $round: $(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("%.0f ratings/s, %.1f ms/step" % (d["ratings_per_s"], d["ms_per_step"]))' "$W/j.json")"
      done
      "${lib[@]}" "$B/dtrun" --standalone --nproc-per-node 2 /usr/bin/python3 "$REF" "$data" -b 256 --timed-iters 200 \
        >"$W/log" 2>&1 || { cat "$W/log"; exit 1; }
      echo "$(basename "$data") $blas torch-adam round $round: $(grep -o '[0-9]* ratings/s (global), [0-9.]* ms/step' "$W/log")"
    done
  done
done
