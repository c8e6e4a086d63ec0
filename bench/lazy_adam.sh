#!/bin/bash
# What --lazy-adam buys train_recsys as the embedding tables grow: 2 ranks under dtrun, batch 256
# per rank, 100 timed steps after 10, Adam and lazy Adam alternating, three rounds; prints each
# run's ratings/s and ms/step (the bench JSON) and the medians per table size and optimizer.
#   bench/lazy_adam.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
B=$(realpath "${1:-build}")/bin
W=${2:-/var/tmp/lazy_adam_bench}
mkdir -p "$W"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
# users:items:least:most ratings per user (dtdata make-ratings' defaults first; its time grows
# with users x items)
for size in 600:2000:20:150 20000:100000:20:40; do
  IFS=: read -r users items least most <<<"$size"
  data=$W/ratings-$users-$items.csv
  [ -s "$data" ] || "$B/dtdata" make-ratings "$data" --users "$users" --items "$items" --min-per-user "$least" \
    --max-per-user "$most" >/dev/null
  for round in 1 2 3; do
    for opt in adam lazy; do
      extra=(); [ $opt = lazy ] && extra=(--lazy-adam)
      json=$W/$users-$opt-$round.json
      "$B/dtrun" --standalone --nproc-per-node 2 "$B/train_recsys" "$data" --output-dir "$W/run" --no-tensorboard \
        -b 256 --warmup-iters 10 --timed-iters 100 --bench-json "$json" "${extra[@]}" >"$W/log" 2>&1 ||
        { cat "$W/log"; exit 1; }
      echo "$users users x $items items, $opt, round $round: $(cat "$json")"
    done
  done
  for opt in adam lazy; do
    cat "$W/$users-$opt-"*.json | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
print("  median %s: %.0f ratings/s, %.2f ms/step" % (sys.argv[1], statistics.median(r["ratings_per_s"] for r in runs),
                                               statistics.median(r["ms_per_step"] for r in runs)))' "$opt"
  done
done
