#!/usr/bin/env bash
# Input pipeline: dtrun's loader vs torchvision on the same realistic JPEGs (500x375, q90), 1 and 2
# workers, plus libjpeg-turbo's full-size decode rate on one core.   bench/pipeline_bench.sh [BUILD]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "${1:-$here/../build}")
data=$(mktemp -d)
"$build/bin/dtdata" make-demo "$data" --width 500 --height 375 --train-per-class 40 --val-per-class 0 >/dev/null
du -sh "$data/train" | sed 's/^/dataset: /'
"$build/bin/dtdata" bench "$data/train" --decode-only --batches 40
for n in 1 2; do
  "$build/bin/dtdata" bench "$data/train" --threads $n --batches 40
  /usr/bin/python3 "$here/torchvision_pipeline.py" "$data/train" --workers $n --batches 40
done
rm -rf "$data"
