#!/bin/bash
# What --lazy-adam buys train_recsys as the embedding tables grow, beside PyTorch doing the same
# (bench/recsys_reference.py: DDP with Adam, and with sparse embedding gradients and SparseAdam).
# 2 ranks under dtrun, batch 256 per rank, 100 timed steps after 10 (PyTorch: after 5), the four
# runs alternating, three rounds; prints each run's ratings/s and ms/step and the medians per
# table size and runner.
#   bench/lazy_adam.sh [BUILD_DIR] [WORK_DIR] [SIZES]
# SIZES: users:items:least:most ratings per user, space-separated (default: dtdata make-ratings'
# defaults, 98k table rows, 850k table rows; catalogs above 100,000 items are written by genre in
# seconds).
set -euo pipefail
B=$(realpath "${1:-build}")/bin
W=${2:-/var/tmp/lazy_adam_bench}
SIZES=${3:-600:2000:20:150 20000:100000:20:40 200000:1000000:5:20}
REF=$(dirname "$(realpath "$0")")/recsys_reference.py
mkdir -p "$W"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"

run() {  # runner data json
  local runner=$1 data=$2 json=$3 cmd
  case $runner in
    adam | lazy)
      cmd=("$B/train_recsys" "$data" --output-dir "$W/run" --no-tensorboard -b 256 --warmup-iters 10
           --timed-iters 100 --bench-json "$json")
      [ "$runner" = lazy ] && cmd+=(--lazy-adam) ;;
    torch-adam | torch-sparse)
      cmd=(/usr/bin/python3 "$REF" "$data" -b 256 --timed-iters 100)
      [ "$runner" = torch-sparse ] && cmd+=(--sparse) ;;
  esac
  "$B/dtrun" --standalone --nproc-per-node 2 "${cmd[@]}" >"$W/log" 2>&1 || { cat "$W/log"; exit 1; }
  if [[ $runner = torch-* ]]; then  # "benchmark: 100 timed steps, R ratings/s (global), M ms/step"
    sed -n 's/.*benchmark: [0-9]* timed steps, \([0-9.]*\) ratings\/s (global), \([0-9.]*\) ms\/step.*/{"ratings_per_s":\1,"ms_per_step":\2}/p' \
      "$W/log" >"$json"
  fi
  [ -s "$json" ] || { cat "$W/log"; echo "no result from $runner"; exit 1; }
}

for size in $SIZES; do
  IFS=: read -r users items least most <<<"$size"
  data=$W/ratings-$users-$items-$least-$most.csv
  [ -s "$data" ] || "$B/dtdata" make-ratings "$data" --users "$users" --items "$items" --min-per-user "$least" \
    --max-per-user "$most"
  for round in 1 2 3; do
    for runner in adam lazy torch-adam torch-sparse; do
      json=$W/$users-$items-$runner-$round.json
      run "$runner" "$data" "$json"
      echo "$users users x $items items, $runner, round $round: $(cat "$json")"
    done
  done
  for runner in adam lazy torch-adam torch-sparse; do
    cat "$W/$users-$items-$runner-"*.json | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
print("  median %s: %.0f ratings/s, %.2f ms/step" % (sys.argv[1], statistics.median(r["ratings_per_s"] for r in runs),
                                               statistics.median(r["ms_per_step"] for r in runs)))' "$runner"
  done
done
