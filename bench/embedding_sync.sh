#!/bin/bash
# train_recsys's embedding gradients, sparse all-gather against dense all-reduce, as the tables
# grow: 2 ranks under dtrun, batch 256 per rank, Adam, 100 timed steps after 10, the two modes
# alternating, three rounds; prints each run's ratings/s and floats sent per step, and the medians.
#   bench/embedding_sync.sh [BUILD_DIR] [WORK_DIR] [SIZES]
# SIZES: users:items:least:most ratings per user, space-separated (default: dtdata make-ratings'
# defaults, and 20,000 users x 100,000 items at 20-40 ratings each, 102k table rows).
set -euo pipefail
B=$(realpath "${1:-build}")/bin
W=${2:-/var/tmp/embedding_sync_bench}
SIZES=${3:-600:2000:20:150 20000:100000:20:40}
mkdir -p "$W"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"

for size in $SIZES; do
  IFS=: read -r users items least most <<<"$size"
  data=$W/ratings-$users-$items-$least-$most.csv
  [ -s "$data" ] || "$B/dtdata" make-ratings "$data" --users "$users" --items "$items" --min-per-user "$least" \
    --max-per-user "$most"
  echo "$data: $("$B/dtdata" check-ratings "$data" | sed 's/^[^:]*: //')"
  for round in 1 2 3; do
    for mode in sparse dense; do
      json=$W/$users-$items-$mode-$round.json
      "$B/dtrun" --standalone --nproc-per-node 2 "$B/train_recsys" "$data" --output-dir "$W/run" --no-tensorboard \
        -b 256 --warmup-iters 10 --timed-iters 100 --embedding-sync "$mode" --bench-json "$json" >"$W/log" 2>&1 ||
        { cat "$W/log"; exit 1; }
      echo "$users users x $items items, $mode, round $round: $(cat "$json")"
    done
  done
  for mode in sparse dense; do
    cat "$W/$users-$items-$mode-"*.json | python3 -c '
import json, statistics, sys
runs = [json.loads(l) for l in sys.stdin]
print("  median %s: %.0f ratings/s, %.0f floats sent a step" % (sys.argv[1],
      statistics.median(r["ratings_per_s"] for r in runs), statistics.median(r["floats_sent_per_step"] for r in runs)))' "$mode"
  done
done
